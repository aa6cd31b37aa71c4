package sim

import (
	"context"
	"sync"
)

// Parallel runs run(i) for i in 0..n-1 on workers goroutines, in index
// order of start. After each successful run it calls progress(i, done)
// (one call at a time, done counting finished runs). It stops feeding new
// runs when ctx ends and returns ctx's error, or else the error of the
// lowest-indexed failed run.
func Parallel(ctx context.Context, n, workers int, run func(i int) error, progress func(i, done int)) error {
	errs := make([]error, n)
	next := make(chan int)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done int
	)
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = run(i)
				mu.Lock()
				done++
				if progress != nil && errs[i] == nil {
					progress(i, done)
				}
				mu.Unlock()
			}
		}()
	}
	var cerr error
feed:
	for i := range n {
		select {
		case <-ctx.Done():
			cerr = ctx.Err()
			break feed
		case next <- i:
		}
	}
	close(next)
	wg.Wait()
	if cerr == nil {
		cerr = ctx.Err() // cancelled while the last runs ran
	}
	if cerr != nil {
		return cerr
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
