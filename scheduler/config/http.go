package config

import (
	"net"
	"strings"
)

// Who the HTTP API answers: tokens (http_require_token) and Host headers
// (http_allowed_hosts), both decided by whether http_address is loopback.

// RequireToken says whether the HTTP API asks callers for a Nomad ACL
// token: http_require_token when set, else whenever http_address listens
// beyond loopback (a host name, an unspecified or a routable address), so
// that an API reachable from other machines never answers anonymously by
// default. On a Nomad cluster without ACLs a request without a token is
// still answered: Nomad itself then answers anyone.
func (c *Config) RequireToken() bool {
	if c.HTTPRequireToken != nil {
		return *c.HTTPRequireToken
	}
	return !loopbackAddress(c.HTTPAddress)
}

// HostAllowed says whether the API answers a request whose Host header
// is host: any host when http_address listens beyond loopback; else
// localhost, a loopback IP or a name in http_allowed_hosts (a DNS
// rebinding guard).
func (c *Config) HostAllowed(host string) bool {
	if !loopbackAddress(c.HTTPAddress) {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if loopbackAddress(host) {
		return true
	}
	for _, a := range c.HTTPAllowedHosts {
		if strings.EqualFold(a, host) {
			return true
		}
	}
	return false
}

// loopbackAddress: addr's host is a loopback IP or "localhost".
func loopbackAddress(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
