package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nested is n arrays of one element each, around an integer.
func nested(n int) string {
	return strings.Repeat("*1\r\n", n) + ":1\r\n"
}

var scanTests = []struct {
	name string
	in   string
	// refused is the index of the first byte refused, -1 when all of in
	// is accepted.
	refused int
}{
	{"integer", ":42\r\n", -1},
	{"simple string", "+OK\r\n", -1},
	{"error", "-MOVED 3999 127.0.0.1:6381\r\n", -1},
	{"RESP3 scalars", "_\r\n,1.5\r\n#t\r\n(3492890328409238509324850943850943825024385\r\n", -1},
	{"a count", "$3\r\n250\r\n", -1},
	{"empty string", "$0\r\n\r\n", -1},
	{"null string and array", "$-1\r\n*-1\r\n", -1},
	{"blob error and verbatim string", "!21\r\nSYNTAX invalid syntax\r\n=15\r\ntxt:Some string\r\n", -1},
	{"a string of the bound", "$16384\r\n" + strings.Repeat("x", 16384) + "\r\n", -1},
	{"a payload with line feeds", "$4\r\n\n\n\r\n\r\n:1\r\n", -1},
	{"pipelined replies", ":1\r\n:0\r\n:3\r\n:1\r\n:250\r\n:1\r\n$-1\r\n", -1},
	{"HELLO", "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n", -1},
	{"CLUSTER SLOTS", "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$40\r\n" + strings.Repeat("a", 40) + "\r\n%1\r\n$8\r\nhostname\r\n$4\r\nhost\r\n", -1},
	{"attribute", "|1\r\n+key-popularity\r\n*2\r\n$1\r\na\r\n,0.1923\r\n:7\r\n", -1},
	{"empty aggregates and attribute", "*0\r\n%0\r\n~0\r\n|0\r\n:1\r\n", -1},
	{"push", ">3\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n:1\r\n", -1},
	{"nested to the bound", nested(8), -1},
	{"elements to the bound", "*1048576\r\n", -1},
	{"map to the bound", "%524288\r\n", -1},
	{"elements to the bound, nested", "*2\r\n*1048574\r\n", -1},
	{"the bound again, reply after reply", "*2\r\n*1\r\n:1\r\n*1048573\r\n" + strings.Repeat(":1\r\n", 1048573) + "*1048576\r\n", -1},
	{"a line of the bound", "+" + strings.Repeat("x", 16381) + "\r\n", -1},

	{"1 GiB string", "$1073741824\r\n", 6},
	{"a string past the bound", "$16385\r\n", 5},
	{"an error past the bound", "!99999\r\n", 5},
	{"verbatim past the bound", "=16385\r\n", 5},
	{"an array past the bound", "*1048577\r\n", 7},
	{"a map past the bound", "%524289\r\n", 6},
	{"an attribute past the bound", "|524288\r\n", 8},
	{"set and push past the bound", "~2000000\r\n", 7},
	{"elements past the bound, nested", "*2\r\n*1048575\r\n", 11},
	{"elements past the bound, in a map", "%1\r\n*1048575\r\n", 11},
	{"nested past the bound", nested(9), 35},
	{"an attribute nested past the bound", nested(8)[:32] + "|0\r\n:1\r\n", 35},
	{"a line past the bound", "-" + strings.Repeat("x", 16382) + "\r\n", 16384},
	{"a line without end", "+" + strings.Repeat("x", 20000), 16384},
	{"unknown type", "?1\r\n", 0},
	{"inline reply", "OK\r\n", 0},
	{"type after a reply", ":1\r\n\r\n", 4},
	{"streamed string", "$?\r\n;4\r\nHell\r\n;0\r\n", 1},
	{"streamed array", "*?\r\n", 1},
	{"length under -1", "$-2\r\n", 2},
	{"length -10", "*-10\r\n", 3},
	{"length -0", "*-0\r\n", 2},
	{"length with a plus", "$+5\r\n", 1},
	{"length with a space", "$ 5\r\n", 1},
	{"empty length", "$\r\n", 1},
	{"length without CR", "$5\nhello\r\n", 2},
	{"length with CR, no LF", "*1\r:1\r\n", 3},
	{"a string past the bound after a reply", ":1\r\n$99999999999999999999999\r\n", 9},
}

// TestReplyScanner: what the scanner accepts and where it refuses, the
// stream given whole, a byte at a time, and in chunks of 7.
func TestReplyScanner(t *testing.T) {
	t.Parallel()
	for _, tc := range scanTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, size := range []int{len(tc.in), 1, 7} {
				got, err := scanChunks([]byte(tc.in), size)
				if tc.refused < 0 {
					if err != nil {
						t.Fatalf("in chunks of %d: refused at %d: %v", size, got, err)
					}
					continue
				}
				if err == nil || !errors.Is(err, errReplyBound) {
					t.Fatalf("in chunks of %d: accepted %d bytes, error %v; want refused at %d", size, got, err, tc.refused)
				}
				if got != tc.refused {
					t.Fatalf("in chunks of %d: refused at %d (%v), want at %d", size, got, err, tc.refused)
				}
			}
		})
	}
}

// scanChunks scans in, size bytes at a time, and returns how many bytes
// were accepted and the error that stopped it.
func scanChunks(in []byte, size int) (int, error) {
	var s replyScanner
	size = max(size, 1)
	for off := 0; off < len(in); off += size {
		end := min(off+size, len(in))
		n, err := s.scan(in[off:end])
		if err != nil {
			return off + n, err
		}
	}
	return len(in), nil
}

// FuzzReplyScanner: the scanner never panics, refuses at the same byte
// however the stream is cut into chunks, and never accepts a declaration
// past the bounds, which a reference parser of what it accepted checks.
func FuzzReplyScanner(f *testing.F) {
	for _, tc := range scanTests {
		if len(tc.in) < 1<<12 {
			f.Add([]byte(tc.in), uint8(3))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		whole, errWhole := scanChunks(in, len(in))
		cut, errCut := scanChunks(in, int(chunk))
		if whole != cut || (errWhole == nil) != (errCut == nil) {
			t.Fatalf("whole: %d accepted (%v); in chunks of %d: %d (%v)", whole, errWhole, chunk, cut, errCut)
		}
		if errWhole != nil && !errors.Is(errWhole, errReplyBound) {
			t.Fatalf("error %v does not wrap errReplyBound", errWhole)
		}
		if err := checkReplies(in[:whole]); err != nil {
			t.Fatalf("accepted %q: %v", in[:whole], err)
		}
	})
}

// checkReplies parses the replies in p, the last of which may be cut
// short, and returns an error if one declares more than the bounds allow
// or if p is not RESP.
func checkReplies(p []byte) error {
	for len(p) > 0 {
		var elements int64
		n, err := checkValue(p, 0, &elements)
		if err != nil {
			return err
		}
		if n < 0 {
			return nil // cut short
		}
		p = p[n:]
	}
	return nil
}

// checkValue parses the value at the start of p, inside depth open
// aggregates, adding what it declares to elements. It returns its length,
// or -1 if p ends before the value does.
func checkValue(p []byte, depth int, elements *int64) (int, error) {
	if len(p) == 0 {
		return -1, nil
	}
	end := bytes.IndexByte(p, '\n')
	if end < 0 {
		if len(p) > maxReplyLine {
			return 0, fmt.Errorf("a line of more than %d bytes", maxReplyLine)
		}
		return -1, nil
	}
	line := p[:end+1]
	if len(line) > maxReplyLine {
		return 0, fmt.Errorf("a line of %d bytes", len(line))
	}
	switch p[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return len(line), nil
	}
	if len(line) < 4 || line[len(line)-2] != '\r' {
		return 0, fmt.Errorf("declaration %q", line)
	}
	digits := string(line[1 : len(line)-2])
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || (n < 0 && digits != "-1") || (n >= 0 && (digits[0] < '0' || digits[0] > '9')) {
		return 0, fmt.Errorf("declaration %q", line)
	}
	if n < 0 {
		return len(line), nil
	}
	at := len(line)
	switch p[0] {
	case '$', '!', '=':
		if n > maxReplyString {
			return 0, fmt.Errorf("a string of %d bytes", n)
		}
		if int64(len(p)-at) < n+2 {
			return -1, nil
		}
		return at + int(n) + 2, nil
	case '*', '~', '>':
	case '%':
		n *= 2
	case '|':
		n = 2*n + 1
	default:
		return 0, fmt.Errorf("type %q", p[0])
	}
	if *elements += n; *elements > maxReplyElements {
		return 0, fmt.Errorf("a reply of %d elements", *elements)
	}
	if n > 0 && depth == maxReplyDepth {
		return 0, fmt.Errorf("aggregates nested %d deep", depth+1)
	}
	for range n {
		m, err := checkValue(p[at:], depth+1, elements)
		if err != nil || m < 0 {
			return m, err
		}
		at += m
	}
	return at, nil
}

// TestBoundedConn: a connection whose peer declares a 1 GiB string fails
// the read that brings the declaration, before the reader sees it, and is
// closed; what comes before passes untouched.
func TestBoundedConn(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	c := boundReplies(client)
	defer c.Close()
	go func() {
		server.Write([]byte(":1\r\n$5\r\nhello\r\n"))
		server.Write([]byte("$1073741824\r\n"))
	}()
	buf := make([]byte, 64)
	var got []byte
	for len(got) < len(":1\r\n$5\r\nhello\r\n") {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("read after %q: %v", got, err)
		}
		got = append(got, buf[:n]...)
	}
	n, err := c.Read(buf)
	if n != 0 || !errors.Is(err, errReplyBound) {
		t.Fatalf("the 1 GiB declaration read: %d bytes %q, error %v", n, buf[:n], err)
	}
	if _, err := server.Write([]byte(":1\r\n")); err == nil {
		t.Error("the connection is still open")
	}
	if _, err2 := c.Read(buf); !errors.Is(err2, errReplyBound) {
		t.Errorf("a read after the refusal: %v, want the refusal again", err2)
	}
}
