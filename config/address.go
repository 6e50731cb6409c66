package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// addrRole is what an address is for, which decides the ports and hosts
// it may have.
type addrRole int

const (
	// toListen is an address the proxy listens on: port 0 lets the system
	// choose, and an empty host means every address.
	toListen addrRole = iota
	// toDial is an address the proxy dials, or tells drivers to dial: it
	// needs a host and a port from 1 to 65535.
	toDial
)

// checkAddr reports what is wrong with addr as a host:port of the role
// given, as far as can be told without listening or dialing: a host name is
// not looked up. Ports are numbers; the names of /etc/services are refused,
// as a likely mistake.
func checkAddr(addr string, role addrRole) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	minPort := 1
	if role == toListen {
		minPort = 0
	}
	var errs []error
	if port == "" {
		errs = append(errs, errors.New("the port is missing"))
	} else if p, err := strconv.ParseUint(port, 10, 64); err != nil {
		errs = append(errs, fmt.Errorf("port %q is not a number from %d to 65535", port, minPort))
	} else if p < uint64(minPort) || p > 65535 {
		errs = append(errs, fmt.Errorf("port %d is outside %d to 65535", p, minPort))
	}
	switch {
	case host == "":
		if role != toListen {
			errs = append(errs, errors.New("the host is missing"))
		}
	case !validHost(host):
		errs = append(errs, fmt.Errorf("host %q is neither an IP address nor a host name", host))
	}
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return fmt.Errorf("%q: %s", addr, strings.Join(msgs, "; "))
}

// validHost reports whether host is an IP address or a host name: dot-
// separated labels of letters, digits, hyphens and underscores (which
// container runtimes' names carry), each of 1 to 63 bytes, 253 in all. A
// name whose last label is a number is a mistyped IPv4 address
// (127.0.0.256, 10.0.0), which no resolver would find.
func validHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	name := strings.TrimSuffix(host, ".")
	if name == "" || len(name) > 253 {
		return false
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if len(l) == 0 || len(l) > 63 {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	_, err := strconv.ParseUint(labels[len(labels)-1], 10, 64)
	return err != nil
}

// sameListener reports whether listening on a and on b at once would
// fail: the same port, on the same host or with either on every address.
// Port 0, the system's choice, never clashes.
func sameListener(a, b string) bool {
	ah, ap, aerr := net.SplitHostPort(a)
	bh, bp, berr := net.SplitHostPort(b)
	if aerr != nil || berr != nil {
		return false
	}
	an, aerr := strconv.ParseUint(ap, 10, 16)
	bn, berr := strconv.ParseUint(bp, 10, 16)
	if aerr != nil || berr != nil || an == 0 || an != bn {
		return false
	}
	return ah == bh || everyAddress(ah) || everyAddress(bh)
}

// everyAddress reports whether a listener on host takes every address.
func everyAddress(host string) bool {
	ip, err := netip.ParseAddr(host)
	return host == "" || err == nil && ip.IsUnspecified()
}
