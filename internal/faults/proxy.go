package faults

import (
	"net"
	"sync"
	"time"
)

// Proxy is a loopback TCP proxy between clients and the server that can
// cut every connection or stall all traffic.
type Proxy struct {
	ln     net.Listener
	target string

	mu         sync.Mutex
	conns      map[*proxyConn]struct{}
	stallUntil time.Time
	closed     bool
	wg         sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
	once           sync.Once
}

// close closes both ends abruptly: with SO_LINGER 0 the peers get a
// reset, not an orderly end of stream.
func (c *proxyConn) close() {
	c.once.Do(func() {
		for _, nc := range []net.Conn{c.client, c.server} {
			if tc, ok := nc.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = nc.Close()
		}
	})
}

// NewProxy listens on a free port of 127.0.0.1 and forwards each
// connection to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Port returns the port the proxy listens on.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 3*time.Second)
		if err != nil {
			_ = client.Close() // the server is down
			continue
		}
		c := &proxyConn{client: client, server: server}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, client, server)
		go p.pipe(c, server, client)
	}
}

// pipe copies from src to dst, holding each chunk while traffic is stalled.
func (p *Proxy) pipe(c *proxyConn, src, dst net.Conn) {
	defer p.wg.Done()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.waitStall()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) waitStall() {
	for {
		p.mu.Lock()
		d := time.Until(p.stallUntil)
		p.mu.Unlock()
		if d <= 0 {
			return
		}
		time.Sleep(min(d, 10*time.Millisecond))
	}
}

// Cut closes every current connection abruptly (both ends get a reset) and
// returns how many there were. New connections are accepted as before.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	return len(conns)
}

// Stall holds all traffic, both ways, for d: bytes are read but not
// forwarded until then.
func (p *Proxy) Stall(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until := time.Now().Add(d); until.After(p.stallUntil) {
		p.stallUntil = until
	}
}

// Close stops listening, cuts every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.stallUntil = time.Time{}
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}
