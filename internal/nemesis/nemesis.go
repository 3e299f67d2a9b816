// Package nemesis breaks the network between a test's raft nodes, link by
// directed link: Net says what happens to the messages from one node to
// another (cut, lost, delayed), Transport applies it to raft messages sent
// in one process, and Proxy to TCP connections between processes. Check
// reads the WALs a cluster wrote and reports any broken invariant; it
// parses the records itself and shares no code with package state.
package nemesis

import (
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"
)

// Fault is what happens to one link's messages.
type Fault struct {
	Cut   bool          // nothing arrives
	Loss  float64       // each message (or, through a Proxy, each read) is lost with this probability
	Delay time.Duration // each message arrives this much later
}

// Link is a directed link between two nodes, by id.
type Link struct{ From, To string }

// Net holds the faults of every link; the zero value of a link is healthy.
type Net struct {
	mu     sync.Mutex
	faults map[Link]Fault
	rng    *rand.Rand
	sent   map[Link]int // messages that went through
	lost   map[Link]int // messages cut or lost
}

// New is a healthy network whose losses follow seed.
func New(seed uint64) *Net {
	return &Net{faults: map[Link]Fault{}, rng: rand.New(rand.NewPCG(seed, 0x6e656d)),
		sent: map[Link]int{}, lost: map[Link]int{}}
}

// Set gives the links from → to, both ways when both is true, the fault f.
func (n *Net) Set(f Fault, from, to string, both bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults[Link{from, to}] = f
	if both {
		n.faults[Link{to, from}] = f
	}
}

// Partition cuts every link between nodes of different groups, both ways.
// Nodes in no group keep their links.
func (n *Net) Partition(groups ...[]string) {
	for i, a := range groups {
		for _, b := range groups[i+1:] {
			for _, x := range a {
				for _, y := range b {
					n.Set(Fault{Cut: true}, x, y, true)
				}
			}
		}
	}
}

// Heal makes every link healthy.
func (n *Net) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.faults)
}

// ErrLost is a message the nemesis did not deliver.
var ErrLost = errors.New("nemesis: message lost")

// pass decides one message on a link: whether it is delivered, and after
// how long.
func (n *Net) pass(from, to string) (time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f, link := n.faults[Link{from, to}], Link{from, to}
	if f.Cut || (f.Loss > 0 && n.rng.Float64() < f.Loss) {
		n.lost[link]++
		return 0, false
	}
	n.sent[link]++
	return f.Delay, true
}

// Counts is how many messages went through and how many were cut or lost.
func (n *Net) Counts() (sent, lost int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, k := range n.sent {
		sent += k
	}
	for _, k := range n.lost {
		lost += k
	}
	return sent, lost
}

// AnswersPerPhase is how many answers the clients must have during each
// phase of a nemesis test: 3, 12 with LEASEWAL_SOAK=1, or
// LEASEWAL_NEMESIS_ANSWERS (a larger run on demand).
func AnswersPerPhase() int32 {
	if n, err := strconv.Atoi(os.Getenv("LEASEWAL_NEMESIS_ANSWERS")); err == nil && n > 0 {
		return int32(n)
	}
	if os.Getenv("LEASEWAL_SOAK") == "1" {
		return 12
	}
	return 3
}
