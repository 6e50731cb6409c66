package main

// The full-screen view of cqlguard top: the terminal in raw mode, frames
// drawn over each other, and text from the admin listener made safe to
// print.

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/cqlguard/cqlguard/admin"
)

// ANSI sequences for the full-screen view.
const (
	enterScreen = "\x1b[?1049h\x1b[?25l" // alternate screen, cursor hidden
	leaveScreen = "\x1b[?25h\x1b[?1049l"
	home        = "\x1b[H"
	eraseLine   = "\x1b[K" // to the end of the line
	eraseBelow  = "\x1b[J" // to the end of the screen
)

// topTerminal draws the view on the terminal out in raw mode, so that q
// and Ctrl-C arrive as keys, and restores the terminal when it returns.
func topTerminal(ctx context.Context, o topOptions, c *admin.Client, out *os.File) error {
	state, err := term.MakeRaw(int(os.Stdin.Fd()))
	if err != nil {
		return fmt.Errorf("terminal: %w", err)
	}
	defer term.Restore(int(os.Stdin.Fd()), state)
	io.WriteString(out, enterScreen)
	defer io.WriteString(out, leaveScreen)

	keys := make(chan byte, 16)
	go func() {
		// Left blocked on stdin when top returns: the process ends then.
		buf := make([]byte, 64)
		for {
			n, err := os.Stdin.Read(buf)
			for _, b := range buf[:n] {
				keys <- b
			}
			if err != nil {
				return
			}
		}
	}()
	return topLoop(ctx, o, c, keys, func(v topView) error {
		v.Interactive = true
		// One column short of the width: a line that fills it leaves the
		// cursor where erasing the rest of the line would erase its end.
		if w, h, err := term.GetSize(int(out.Fd())); err == nil {
			v.Width, v.Height = w-1, h
		}
		_, err := io.WriteString(out, terminalFrame(renderTop(v)))
		return err
	})
}

// terminalFrame draws frame over the previous one: raw mode does not turn
// \n into \r\n, and erasing each line's rest, rather than clearing the
// screen first, keeps the view from flickering.
func terminalFrame(frame string) string {
	var b strings.Builder
	b.WriteString(home)
	for i, line := range strings.Split(frame, "\n") {
		if i > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString(line)
		b.WriteString(eraseLine)
	}
	b.WriteString(eraseBelow)
	return b.String()
}

// printable escapes what, in text from the admin listener, would drive the
// terminal or hide or reorder the text around it: control characters
// (C0, C1 and DEL), format characters such as the bidi controls (U+202A to
// U+202E, U+2066 to U+2069) and zero-width spaces, line and paragraph
// separators, surrogates, private-use and unassigned code points, and
// bytes that are not UTF-8. Each is shown as in a Go string literal:
// \x1b, \u202e, \U000e0001, a stray byte as \xff. Backslashes are left as
// they are, so that escaping escaped text changes nothing.
func printable(s string) string {
	if !strings.ContainsFunc(s, hidden) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !hidden(r):
			b.WriteString(s[i : i+n])
		case r < utf8.RuneSelf:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += n
	}
	return b.String()
}

// hidden reports whether r is shown escaped: all but letters, marks,
// numbers, punctuation, symbols and spaces.
func hidden(r rune) bool { return !unicode.IsGraphic(r) }
