package gpuhistory

import "time"

// Point is one sample of a series.
type Point struct {
	At    time.Time `json:"at"`
	Value float64   `json:"value"`
}

// ring is a series of at most len(buf) points, oldest overwritten first.
type ring struct {
	buf  []Point
	next int // where the next point goes
	n    int // points held
}

func newRing(size int) *ring { return &ring{buf: make([]Point, max(size, 1))} }

func (r *ring) add(p Point) {
	r.buf[r.next] = p
	r.next = (r.next + 1) % len(r.buf)
	r.n = min(r.n+1, len(r.buf))
}

// last is the newest point; ok false when the ring is empty.
func (r *ring) last() (Point, bool) {
	if r.n == 0 {
		return Point{}, false
	}
	return r.buf[(r.next-1+len(r.buf))%len(r.buf)], true
}

// since lists the points at or after from, oldest first.
func (r *ring) since(from time.Time) []Point {
	out := make([]Point, 0, r.n)
	start := (r.next - r.n + len(r.buf)) % len(r.buf)
	for i := range r.n {
		p := r.buf[(start+i)%len(r.buf)]
		if !p.At.Before(from) {
			out = append(out, p)
		}
	}
	return out
}
