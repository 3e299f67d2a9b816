package nemesis

import (
	"net"
	"sync"
	"time"
)

// Proxy stands in front of one node's raft port: the other nodes dial the
// proxy (the node advertises its address), and it forwards each connection
// to the node with the faults of the link it comes from, which it tells by
// the connection's source IP (each node dials from an address of its own).
// TCP loses no message by itself, so a lost read resets the connection, as
// a dropped link does; a cut link refuses or resets every connection.
type Proxy struct {
	net    *Net
	to     string
	target string
	from   map[string]string // source IP → node id
	ln     net.Listener
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Proxy listens on listen for the connections to node to, which answers at
// target; from names the node behind each source IP.
func (n *Net) Proxy(to, listen, target string, from map[string]string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{net: n, to: to, target: target, from: from, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is where the proxy listens.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening and closes every connection; it returns once every
// goroutine of the proxy has ended.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil // closed: no connection is tracked after this
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !on {
		delete(p.conns, c) // a no-op once closed
		return true
	}
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		host, _, _ := net.SplitHostPort(in.RemoteAddr().String())
		from := p.from[host]
		if _, ok := p.net.pass(from, p.to); !ok || from == "" {
			in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, true) || !p.track(out, true) {
			in.Close()
			out.Close()
			continue
		}
		p.wg.Add(2)
		go p.pump(in, out, from, p.to)
		go p.pump(out, in, p.to, from)
	}
}

// pump copies src to dst while the link from → to lets each read through,
// and closes both when it does not or either ends.
func (p *Proxy) pump(src, dst net.Conn, from, to string) {
	defer p.wg.Done()
	defer func() {
		src.Close()
		dst.Close()
		p.track(src, false)
		p.track(dst, false)
	}()
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			delay, ok := p.net.pass(from, to)
			if !ok {
				return
			}
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
