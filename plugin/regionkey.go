package plugin

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// EnvRegion names, in the task's environment, the key of its usage region:
// the directory <reservation>/region/<key> where the library's first
// process creates the usage file (plugin/interposer/README.md, "Who can
// reach a reservation's state"). A process's environment is readable by
// its own user and root only, and region/ is root's and not listable, so
// no other user can name that directory, let alone put a file there
// before the task's first process does (issue 44, point 11).
const EnvRegion = "GPUSHARE_REGION"

// regionKeyLen is the key's length: 16 random bytes in lower-case hex (the
// library accepts nothing else).
const regionKeyLen = 32

func isRegionKey(name string) bool {
	if len(name) != regionKeyLen {
		return false
	}
	for _, c := range name {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ownDir: path is a directory (not a link) of this process's user: one the
// plugin made, not one another user put there while region/ was an older
// plugin's 1733.
func ownDir(path string) bool {
	st, err := os.Lstat(path)
	if err != nil || !st.IsDir() {
		return false
	}
	s, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(s.Uid) == os.Geteuid()
}

// regionKey makes region (root's, 0711) and returns the key of the usage
// region the reservation's task gets: the one a live process still holds
// (the shares reused while processes of their last task live: their
// charges stay), else a fresh one, its directory made 1733. Everything
// else in region goes: regions no live process holds, an older plugin's
// region/usage, and whatever another user created while region was 1733.
func (p *Plugin) regionKey(region string) (string, error) {
	if err := os.Mkdir(region, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("cannot create the reservation's region directory: %w", err)
	}
	if err := os.Chmod(region, 0o711); err != nil { // an older plugin's was 1733
		return "", err
	}
	entries, err := os.ReadDir(region)
	if err != nil {
		return "", err
	}
	key := ""
	for _, e := range entries {
		path := filepath.Join(region, e.Name())
		switch {
		case isRegionKey(e.Name()) && ownDir(path):
			live, err := liveSlots(filepath.Join(path, usageFile))
			if err == nil && live > 0 {
				p.logger.Info("interposer: reservation reused while processes still hold its usage region; keeping their charges",
					"dir", region, "live_processes", live)
				if key == "" {
					key = e.Name()
				}
				continue // never removed under a live process
			}
		case e.Name() == usageFile:
			if live, err := liveSlots(path); err == nil && live > 0 {
				continue // an older library's, still in use: left to its processes
			}
		}
		if err := os.RemoveAll(path); err != nil {
			return "", err
		}
	}
	if key != "" {
		return key, nil
	}
	b := make([]byte, regionKeyLen/2)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	key = hex.EncodeToString(b)
	dir := filepath.Join(region, key)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("cannot create the task's region directory: %w", err)
	}
	// the task's first process, whatever its user, creates the usage file
	// here; nobody lists it or removes another's file
	if err := os.Chmod(dir, os.ModeSticky|0o733); err != nil {
		return "", err
	}
	return key, nil
}

// regionFiles: the usage files a live process of dir's task may hold: each
// key's, an older library's region/usage, an older plugin's beside limits.
func regionFiles(dir string) []string {
	files := []string{filepath.Join(dir, regionDir, usageFile), filepath.Join(dir, usageFile)}
	entries, _ := os.ReadDir(filepath.Join(dir, regionDir))
	for _, e := range entries {
		if isRegionKey(e.Name()) {
			files = append(files, filepath.Join(dir, regionDir, e.Name(), usageFile))
		}
	}
	return files
}
