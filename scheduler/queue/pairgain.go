package queue

import "math"

// PairGain is SJF-BSBF's rule for sharing a GPU (Yu et al.): the saving in
// the summed completion times, from now, of job j (tj seconds alone) and
// the running job r it would share with (tr seconds alone left), at
// normalised throughputs nj and nr together, against j waiting w seconds
// for a GPU of its own, or for r's when r ends if that is sooner: waiting
// costs tr + min(w, tr) + tj. Positive means sharing wins. Infinite w is
// SJF-BSBF's own case (j waits for r).
func PairGain(tr, tj, nr, nj, w float64) float64 {
	wait := tr + min(w, tr) + tj
	if !(nr > 0 && nj > 0) {
		return -wait // a pair that makes no progress never wins
	}
	var pair float64
	if a := tr / nr; a <= tj/nj {
		pair = a + a + (tj - a*nj) // r ends first; j finishes alone
	} else {
		b := tj / nj
		pair = b + b + (tr - b*nr)
	}
	return wait - pair
}

// SharedFinish is when, from now, job j (tj seconds alone) ends if it
// shares a GPU with running job r (tr seconds alone left) at normalised
// throughputs nj and nr: shared until the first of them ends, then alone.
func SharedFinish(tr, tj, nr, nj float64) float64 {
	if !(nr > 0 && nj > 0) {
		return math.Inf(1)
	}
	if a := tr / nr; a < tj/nj {
		return a + (tj - a*nj) // r ends first; j finishes alone
	}
	return tj / nj
}
