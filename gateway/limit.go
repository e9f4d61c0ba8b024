package gateway

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiters holds one token bucket per user, bounded to max users: when
// full, buckets idle for a minute are dropped, and if none is idle the
// oldest-seen one is (that user starts again with a full bucket).
type limiters struct {
	mu    sync.Mutex
	every rate.Limit
	burst int
	max   int
	m     map[string]*userLimiter
}

type userLimiter struct {
	l    *rate.Limiter
	seen time.Time
}

func newLimiters(perSecond float64, burst, max int) *limiters {
	return &limiters{every: rate.Limit(perSecond), burst: burst, max: max, m: map[string]*userLimiter{}}
}

// allow takes a token for user; when none is left it returns how long
// until one is.
func (ls *limiters) allow(user string, now time.Time) (bool, time.Duration) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	u, ok := ls.m[user]
	if !ok {
		if len(ls.m) >= ls.max {
			ls.evict(now)
		}
		u = &userLimiter{l: rate.NewLimiter(ls.every, ls.burst)}
		ls.m[user] = u
	}
	u.seen = now
	r := u.l.ReserveN(now, 1)
	if !r.OK() {
		return false, time.Second
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

func (ls *limiters) evict(now time.Time) {
	var oldest string
	var oldestSeen time.Time
	for k, u := range ls.m {
		if now.Sub(u.seen) > time.Minute {
			delete(ls.m, k)
			continue
		}
		if oldest == "" || u.seen.Before(oldestSeen) {
			oldest, oldestSeen = k, u.seen
		}
	}
	if len(ls.m) >= ls.max && oldest != "" {
		delete(ls.m, oldest)
	}
}
