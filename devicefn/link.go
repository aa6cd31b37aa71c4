package devicefn

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// LinkKind is how two GPUs are connected, in the vocabulary of
// `nvidia-smi topo -m`. Kinds are ordered from the best connection to the
// worst, so a smaller kind is always the better link.
type LinkKind uint8

const (
	// LinkSelf is a GPU's link to itself ("X").
	LinkSelf LinkKind = iota
	// LinkNVLink is a bonded set of NVLinks ("NV#").
	LinkNVLink
	// LinkPIX traverses at most a single PCIe bridge.
	LinkPIX
	// LinkPXB traverses multiple PCIe bridges without the host bridge.
	LinkPXB
	// LinkPHB traverses a PCIe host bridge (typically the CPU).
	LinkPHB
	// LinkNODE traverses the interconnect between host bridges in one NUMA node.
	LinkNODE
	// LinkSYS traverses the SMP interconnect between NUMA nodes (QPI/UPI).
	LinkSYS
)

var kindNames = [...]string{"X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"}

// String returns the topo -m name of the kind ("NV" without a count).
func (k LinkKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("LinkKind(%d)", uint8(k))
}

// Link is one cell of the link matrix.
type Link struct {
	Kind LinkKind
	// NVLinks is the number of bonded NVLinks; set only when Kind is LinkNVLink.
	NVLinks int
}

// ErrBadLink is returned for a link string outside the topo -m vocabulary.
var ErrBadLink = errors.New("invalid link")

// ParseLink parses one cell of `nvidia-smi topo -m` (X, NV#, PIX, PXB, PHB,
// NODE, SYS). The legacy label SOC, printed by old drivers for what is now
// SYS, is read as SYS.
func ParseLink(s string) (Link, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "X":
		return Link{Kind: LinkSelf}, nil
	case "PIX":
		return Link{Kind: LinkPIX}, nil
	case "PXB":
		return Link{Kind: LinkPXB}, nil
	case "PHB":
		return Link{Kind: LinkPHB}, nil
	case "NODE":
		return Link{Kind: LinkNODE}, nil
	case "SYS", "SOC":
		return Link{Kind: LinkSYS}, nil
	}
	if n, ok := strings.CutPrefix(s, "NV"); ok {
		count, err := strconv.Atoi(n)
		if err == nil && count > 0 && count <= 64 {
			return Link{Kind: LinkNVLink, NVLinks: count}, nil
		}
	}
	return Link{}, fmt.Errorf("%w %q: want one of X, NV<n> (n = 1..64), PIX, PXB, PHB, NODE, SYS", ErrBadLink, s)
}

// String returns the topo -m spelling of the link (for example "NV2").
func (l Link) String() string {
	if l.Kind == LinkNVLink {
		return "NV" + strconv.Itoa(l.NVLinks)
	}
	return l.Kind.String()
}

// MarshalText writes the topo -m spelling, so that a Matrix reads as
// [["X","NV2"],["NV2","X"]] in JSON.
func (l Link) MarshalText() ([]byte, error) {
	if l.Kind > LinkSYS || (l.Kind == LinkNVLink) != (l.NVLinks > 0) || l.NVLinks > 64 {
		return nil, fmt.Errorf("%w: cannot encode %+v", ErrBadLink, l)
	}
	return []byte(l.String()), nil
}

// UnmarshalText reads the topo -m spelling (ParseLink).
func (l *Link) UnmarshalText(b []byte) error {
	v, err := ParseLink(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Better reports whether l is a strictly better connection than o: a closer
// kind, or more bonded NVLinks.
func (l Link) Better(o Link) bool {
	if l.Kind != o.Kind {
		return l.Kind < o.Kind
	}
	return l.NVLinks > o.NVLinks
}

// Matrix is the square GPU-to-GPU link matrix, indexed in NVML index order.
type Matrix [][]Link

// Validate checks that m is square, has X exactly on its diagonal and is
// symmetric. Errors name the offending cell.
func (m Matrix) Validate() error {
	n := len(m)
	for i, row := range m {
		if len(row) != n {
			return fmt.Errorf("link matrix row %d has %d entries, want %d (one per GPU)", i, len(row), n)
		}
	}
	for i := range n {
		for j := range n {
			self := m[i][j].Kind == LinkSelf
			if self != (i == j) {
				if i == j {
					return fmt.Errorf("link matrix [%d][%d] is %s, want X on the diagonal", i, j, m[i][j])
				}
				return fmt.Errorf("link matrix [%d][%d] is X, but X is only for a GPU to itself", i, j)
			}
			if m[i][j] != m[j][i] {
				return fmt.Errorf("link matrix is not symmetric: [%d][%d] is %s but [%d][%d] is %s", i, j, m[i][j], j, i, m[j][i])
			}
		}
	}
	return nil
}

// EncodeRow writes one row of the matrix as the compact attribute string,
// for example "NV18,NV18,X,NV18".
func EncodeRow(row []Link) string {
	var b strings.Builder
	for i, l := range row {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.String())
	}
	return b.String()
}

// DecodeRow parses the compact attribute form written by EncodeRow.
func DecodeRow(s string) ([]Link, error) {
	if s == "" {
		return nil, fmt.Errorf("%w: empty link row", ErrBadLink)
	}
	parts := strings.Split(s, ",")
	row := make([]Link, len(parts))
	for i, p := range parts {
		l, err := ParseLink(p)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		row[i] = l
	}
	return row, nil
}

// Sub returns the matrix restricted to the given GPU indices, in that order.
func (m Matrix) Sub(idx []int) Matrix {
	out := make(Matrix, len(idx))
	for a, i := range idx {
		out[a] = make([]Link, len(idx))
		for b, j := range idx {
			out[a][b] = m[i][j]
		}
	}
	return out
}
