// Command certs writes a throwaway certificate authority and a node
// certificate it signs, PEM, for the test Cassandra's TLS on its native
// port and the test Redis's TLS; test/cassandra/cassandra.sh runs it before
// every start, test/redis/redis.sh before every start-tls.
//
// In -dir it writes ca.pem (the CA's certificate, for clients to verify the
// node with) and node.pem (the node's PKCS#8 private key followed by its
// certificate, the layout Cassandra's PEMBasedSslContextFactory reads). The
// CA's key is not kept: nothing else can be signed with it.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	dir := flag.String("dir", "", "directory to write ca.pem and node.pem to")
	hosts := flag.String("hosts", "127.0.0.2,localhost", "comma-separated IP addresses and names the node certificate is for")
	name := flag.String("name", "cqlguard test Cassandra", "common name of the node certificate")
	valid := flag.Duration("valid", 30*24*time.Hour, "how long the certificates are valid")
	flag.Parse()
	if *dir == "" {
		fail(fmt.Errorf("-dir is required"))
	}
	if err := write(*dir, *name, strings.Split(*hosts, ","), *valid); err != nil {
		fail(err)
	}
}

func write(dir, name string, hosts []string, valid time.Duration) error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "cqlguard test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(valid),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("signing the CA certificate: %w", err)
	}
	ca, err = x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}

	nodeKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	node := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			node.IPAddresses = append(node.IPAddresses, ip)
		} else if h != "" {
			node.DNSNames = append(node.DNSNames, h)
		}
	}
	nodeDER, err := x509.CreateCertificate(rand.Reader, node, ca, &nodeKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("signing the node certificate: %w", err)
	}
	nodePKCS8, err := x509.MarshalPKCS8PrivateKey(nodeKey)
	if err != nil {
		return err
	}

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	nodePEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: nodePKCS8})
	nodePEM = append(nodePEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: nodeDER})...)
	if err := os.WriteFile(filepath.Join(dir, "node.pem"), nodePEM, 0o600); err != nil {
		return err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return os.WriteFile(filepath.Join(dir, "ca.pem"), caPEM, 0o644)
}

// serial is a random certificate serial number, as RFC 5280 asks: a
// positive integer of at most 20 octets.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		fail(err)
	}
	return n
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "certs:", err)
	os.Exit(1)
}
