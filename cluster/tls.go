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

// tlsStream is a raft.StreamLayer over mutual TLS.
type tlsStream struct {
	net.Listener
	advertise net.Addr
	client    *tls.Config
}

func (s *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	dialer := &net.Dialer{Timeout: timeout}
	return tls.DialWithDialer(dialer, "tcp", string(address), s.client)
}

func (s *tlsStream) Addr() net.Addr { return s.advertise }

// NewTLSTransport listens for raft on bind with mutual TLS.
func NewTLSTransport(bind string, t TLS, log io.Writer) (raft.Transport, error) {
	if t.CA == nil {
		return nil, errors.New("raft over TLS needs the CA that signs every node's certificate (--ca)")
	}
	listener, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	advertise, ok := listener.Addr().(*net.TCPAddr)
	if !ok || advertise.IP.IsUnspecified() {
		listener.Close()
		return nil, fmt.Errorf("--raft-bind %s: give an address the other nodes can reach, not every interface", bind)
	}
	server := &tls.Config{Certificates: []tls.Certificate{t.Cert}, ClientCAs: t.CA, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12}
	client := &tls.Config{Certificates: []tls.Certificate{t.Cert}, RootCAs: t.CA, MinVersion: tls.VersionTLS12}
	stream := &tlsStream{Listener: tls.NewListener(listener, server), advertise: advertise, client: client}
	return raft.NewNetworkTransport(stream, 3, 10*time.Second, log), nil
}
