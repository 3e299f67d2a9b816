package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// TLS makes raft's transport mutual TLS: each node presents Cert and accepts
// only peers whose certificate CA signed, so that only the cluster's nodes
// can send raft messages (plain TCP would let anyone who reaches the raft
// port append entries).
type TLS struct {
	Cert tls.Certificate
	CA   *x509.CertPool
}

// stream is raft's stream layer: it listens on the bind address, tells the
// other nodes the advertised one, and dials from the bind address's IP when
// that is a specific one, so that a peer (or a proxy in front of it) sees
// which node a connection comes from and a multi-homed host speaks from the
// address it was given.
type stream struct {
	net.Listener
	advertise net.Addr
	dialer    net.Dialer
	client    *tls.Config // nil: plain TCP
}

func (s *stream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	dialer := s.dialer
	dialer.Timeout = timeout
	if s.client != nil {
		return tls.DialWithDialer(&dialer, "tcp", string(address), s.client)
	}
	return dialer.Dial("tcp", string(address))
}

func (s *stream) Addr() net.Addr { return s.advertise }

// advertisedAddr is a host:port as given, a host name kept unresolved.
type advertisedAddr string

func (a advertisedAddr) Network() string { return "tcp" }
func (a advertisedAddr) String() string  { return string(a) }

// NewTransport listens for raft on bind, over mutual TLS when t is set. The
// other nodes are told advertise ("" for the bind address itself, which must
// then be a specific address).
func NewTransport(bind, advertise string, t *TLS, log io.Writer) (raft.Transport, error) {
	if t != nil && t.CA == nil {
		return nil, errors.New("raft over TLS needs the CA that signs every node's certificate (--ca)")
	}
	listener, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	local, _ := listener.Addr().(*net.TCPAddr)
	s := &stream{Listener: listener, advertise: local}
	if local != nil && !local.IP.IsUnspecified() {
		s.dialer.LocalAddr = &net.TCPAddr{IP: local.IP}
	}
	if advertise != "" {
		host, port, err := net.SplitHostPort(advertise)
		if ip := net.ParseIP(host); err != nil || host == "" || port == "0" || (ip != nil && ip.IsUnspecified()) {
			listener.Close()
			return nil, fmt.Errorf("--raft-advertise %q: give host:port, which the other nodes dial", advertise)
		}
		s.advertise = advertisedAddr(advertise)
	} else if local == nil || local.IP.IsUnspecified() {
		listener.Close()
		return nil, fmt.Errorf("--raft-bind %s: give an address the other nodes can reach, not every interface (or --raft-advertise)", bind)
	}
	if t != nil {
		server := &tls.Config{Certificates: []tls.Certificate{t.Cert}, ClientCAs: t.CA, ClientAuth: tls.RequireAndVerifyClientCert,
			MinVersion: tls.VersionTLS12}
		s.client = &tls.Config{Certificates: []tls.Certificate{t.Cert}, RootCAs: t.CA, MinVersion: tls.VersionTLS12}
		s.Listener = tls.NewListener(listener, server)
	}
	return raft.NewNetworkTransport(s, 3, 10*time.Second, log), nil
}
