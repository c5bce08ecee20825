// Package memo holds bounded caches for pure checks: the same question
// asked again (the same regex for the same Envoy release, the same patch
// content) is answered from memory, while a hostile document full of
// distinct values can't grow the cache past its bound.
package memo

import "sync"

// Cache maps keys to the results of a pure function. It holds at most
// Max entries: adding one more first drops an arbitrary entry, which
// costs a later call a recomputation and never changes an answer. It is
// safe for concurrent use.
type Cache[K comparable, V any] struct {
	mu  sync.Mutex
	max int
	m   map[K]V
}

// New returns an empty cache of at most max entries.
func New[K comparable, V any](max int) *Cache[K, V] {
	if max < 1 {
		max = 1
	}
	return &Cache[K, V]{max: max}
}

// Get returns the value stored for k.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	v, ok := c.m[k]
	c.mu.Unlock()
	return v, ok
}

// Put stores v for k.
func (c *Cache[K, V]) Put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[K]V)
	}
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[k] = v
}

// Do returns the value stored for k, or computes it with f and stores
// it. f runs without the lock held, so two callers may compute the same
// value at once; f must be pure.
func (c *Cache[K, V]) Do(k K, f func() V) V {
	if v, ok := c.Get(k); ok {
		return v
	}
	v := f()
	c.Put(k, v)
	return v
}

// Len is the number of entries held.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
