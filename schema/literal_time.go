package schema

// Dates, times and timestamps, as java.time reads them (see literal.go).

import (
	"bytes"
	"fmt"
	"math"
)

// Date and time arithmetic, proleptic Gregorian as java.time.

const (
	msPerDay  = 86_400_000
	nsPerDay  = 86_400_000_000_000
	maxDigits = 19 // java.time reads at most 19 digits a field
)

// daysFromCivil returns the days since 1970-01-01 of y-m-d.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func isLeap(y int64) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func monthLength(y, m int64) int64 {
	switch m {
	case 2:
		if isLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// cursor reads date and time text.
type cursor struct {
	s   []byte
	pos int
}

func (c *cursor) done() bool { return c.pos == len(c.s) }

func (c *cursor) is(b byte) bool {
	if c.pos < len(c.s) && c.s[c.pos] == b {
		c.pos++
		return true
	}
	return false
}

// digits reads between min and max digits, reporting their value and
// count.
func (c *cursor) digits(min, max int) (int64, int, bool) {
	start := c.pos
	var v int64
	for c.pos < len(c.s) && isDigit(c.s[c.pos]) && c.pos-start < max {
		v = v*10 + int64(c.s[c.pos]-'0')
		c.pos++
	}
	n := c.pos - start
	return v, n, n >= min && n > 0
}

// rawDays reads a date given as a number: days with the epoch at 2^31.
func rawDays(s []byte) (uint32, error) {
	v, ok := parseInt64(s)
	if !ok || v < 0 || v > math.MaxUint32 {
		return 0, fmt.Errorf("date %s out of range", s)
	}
	return uint32(v), nil
}

// parseDate reads a date literal as SimpleDateSerializer does: a number of
// days, or ISO_LOCAL_DATE resolved strictly (no February 30).
func parseDate(s []byte) (uint32, error) {
	if isRawInteger(s) {
		return rawDays(s)
	}
	c := cursor{s: s}
	y, ok := c.isoYear(10)
	if !ok || !c.is('-') {
		return 0, fmt.Errorf("bad date %q", s)
	}
	m, _, ok1 := c.digits(2, 2)
	ok2 := c.is('-')
	d, _, ok3 := c.digits(2, 2)
	if !ok1 || !ok2 || !ok3 || !c.done() || m < 1 || m > 12 || d < 1 || d > monthLength(y, m) {
		return 0, fmt.Errorf("bad date %q", s)
	}
	days := daysFromCivil(y, m, d)
	if days < math.MinInt32 || days > math.MaxInt32 {
		return 0, fmt.Errorf("date %q out of range", s)
	}
	return uint32(days + 1<<31), nil
}

// isoYear reads java.time's year field of at least four digits: a sign is
// required beyond four, and refused with four or fewer unless negative.
func (c *cursor) isoYear(max int) (int64, bool) {
	sign := byte(0)
	if c.pos < len(c.s) && (c.s[c.pos] == '+' || c.s[c.pos] == '-') {
		sign = c.s[c.pos]
		c.pos++
	}
	y, n, ok := c.digits(4, max)
	if !ok || sign == 0 && n > 4 || sign == '+' && n <= 4 {
		return 0, false
	}
	if c.pos < len(c.s) && isDigit(c.s[c.pos]) {
		return 0, false
	}
	if sign == '-' {
		y = -y
	}
	return y, y >= -999_999_999 && y <= 999_999_999
}

// isRawInteger reports whether s matches ^-?\d+$.
func isRawInteger(s []byte) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 {
		return false
	}
	for _, c := range s {
		if !isDigit(c) {
			return false
		}
	}
	return true
}

// parseTime reads a time literal as TimeSerializer does: nanoseconds of
// the day, or hh:mm:ss[.fffffffff] with each field as Integer.parseInt
// reads it (signs allowed) and the whole trimmed.
func parseTime(s []byte) (int64, error) {
	if isRawInteger(s) {
		v, ok := parseInt64(s)
		if !ok || v < 0 || v >= nsPerDay {
			return 0, fmt.Errorf("time %s out of range", s)
		}
		return v, nil
	}
	s = javaTrim(s)
	c1 := bytes.IndexByte(s, ':')
	c2 := -1
	if c1 >= 0 {
		if i := bytes.IndexByte(s[c1+1:], ':'); i >= 0 {
			c2 = c1 + 1 + i
		}
	}
	if c1 <= 0 || c2 <= 0 || c2 >= len(s)-1 {
		return 0, fmt.Errorf("bad time %q", s)
	}
	h, ok1 := parseJavaInt(s[:c1])
	m, ok2 := parseJavaInt(s[c1+1 : c2])
	if !ok1 || !ok2 || h < 0 || h >= 24 || m < 0 || m >= 60 {
		return 0, fmt.Errorf("bad time %q", s)
	}
	rest := s[c2+1:]
	var sec, nanos int64
	var ok bool
	if dot := bytes.IndexByte(rest, '.'); dot >= 0 {
		frac := rest[dot+1:]
		if dot == 0 || len(frac) == 0 || len(frac) > 9 || !isDigit(frac[0]) {
			return 0, fmt.Errorf("bad time %q", s)
		}
		if sec, ok = parseJavaInt(rest[:dot]); !ok {
			return 0, fmt.Errorf("bad time %q", s)
		}
		for i := range 9 {
			nanos *= 10
			if i < len(frac) {
				if !isDigit(frac[i]) {
					return 0, fmt.Errorf("bad time %q", s)
				}
				nanos += int64(frac[i] - '0')
			}
		}
	} else if sec, ok = parseJavaInt(rest); !ok {
		return 0, fmt.Errorf("bad time %q", s)
	}
	if sec < 0 || sec >= 60 {
		return 0, fmt.Errorf("bad time %q", s)
	}
	return ((h*60+m)*60+sec)*1e9 + nanos, nil
}

// javaTrim drops leading and trailing bytes <= ' ', as String.trim.
func javaTrim(s []byte) []byte {
	for len(s) > 0 && s[0] <= ' ' {
		s = s[1:]
	}
	for len(s) > 0 && s[len(s)-1] <= ' ' {
		s = s[:len(s)-1]
	}
	return s
}

// parseJavaInt reads an int as Integer.parseInt does (ASCII digits only).
func parseJavaInt(s []byte) (int64, bool) {
	if len(s) > 0 && s[0] == '+' {
		s = s[1:]
		if len(s) > 0 && s[0] == '-' {
			return 0, false
		}
	}
	v, ok := parseInt64(s)
	return v, ok && v >= math.MinInt32 && v <= math.MaxInt32
}

// parseTimestamp reads a timestamp string as TimestampSerializer does and
// returns milliseconds since the epoch.
func parseTimestamp(s []byte) (int64, error) {
	if equalFold(s, "now") {
		return 0, fmt.Errorf("timestamp 'now': %w", errNotDeterministic)
	}
	if isRawInteger(s) {
		v, ok := parseInt64(s)
		if !ok {
			return 0, fmt.Errorf("timestamp %s out of range", s)
		}
		return v, nil
	}
	if ms, ok, err := parseDateTime(s); ok || err != nil {
		return ms, err
	}
	if ms, ok, err := parseDateOnly(s); ok || err != nil {
		return ms, err
	}
	return 0, fmt.Errorf("bad timestamp %q", s)
}

// parseDateTime reads y-M-d('T'|' ')H:m[:s][.f{0,9}][zone], each field of
// one to 19 digits, resolved as java.time's SMART resolver does: a day past
// the month's end becomes its last day, and 24:00 is the next midnight.
func parseDateTime(s []byte) (int64, bool, error) {
	c := cursor{s: s}
	y, _, ok := c.digits(1, maxDigits)
	if !ok || !c.is('-') {
		return 0, false, nil
	}
	mo, _, ok1 := c.digits(1, maxDigits)
	ok2 := c.is('-')
	d, _, ok3 := c.digits(1, maxDigits)
	ok4 := c.is('T') || c.is(' ')
	h, _, ok5 := c.digits(1, maxDigits)
	ok6 := c.is(':')
	mi, _, ok7 := c.digits(1, maxDigits)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 {
		return 0, false, nil
	}
	var sec, ms int64
	if c.pos+1 < len(s) && s[c.pos] == ':' && isDigit(s[c.pos+1]) {
		c.pos++
		sec, _, _ = c.digits(1, maxDigits)
	}
	nanoZero := true
	if c.is('.') {
		f, n, _ := c.digits(0, 9)
		for range 9 - n {
			f *= 10
		}
		nanoZero = f == 0
		ms = f / 1e6
	}
	off, ok := parseZone(s[c.pos:], false)
	if !ok {
		return 0, false, nil
	}
	if y < 1 || y > 999_999_999 || mo < 1 || mo > 12 || d < 1 || d > 31 ||
		h < 0 || h > 24 || mi > 59 || sec > 59 || h == 24 && (mi != 0 || sec != 0 || !nanoZero) {
		return 0, false, fmt.Errorf("timestamp %q out of range", s)
	}
	d = min(d, monthLength(y, mo))
	days := daysFromCivil(y, mo, d)
	return epochMillis(s, days, h*3600+mi*60+sec-off, ms)
}

// parseDateOnly reads a date: yyyy-MM-dd with a zone (the year of era,
// so positive), or ISO_DATE (the proleptic year, and only the zones Z and
// +hh:mm), at midnight, with SMART resolution.
func parseDateOnly(s []byte) (int64, bool, error) {
	c := cursor{s: s}
	y, ok := c.isoYear(maxDigits)
	if !ok || !c.is('-') {
		return 0, false, nil
	}
	yearDigits := c.pos - 1
	if s[0] == '+' || s[0] == '-' {
		yearDigits--
	}
	mo, _, ok1 := c.digits(2, 2)
	ok2 := c.is('-')
	d, _, ok3 := c.digits(2, 2)
	if !ok1 || !ok2 || !ok3 {
		return 0, false, nil
	}
	zone := s[c.pos:]
	isoZone := len(zone) == 0 || string(zone) == "Z" || len(zone) == 6 && zone[3] == ':'
	iso := yearDigits <= 10 && isoZone
	ofEra := y >= 1 && len(zone) > 0
	if !iso && !ofEra {
		return 0, false, nil
	}
	off, ok := parseZone(zone, true)
	if !ok {
		return 0, false, nil
	}
	if mo < 1 || mo > 12 || d < 1 || d > 31 {
		return 0, false, fmt.Errorf("timestamp %q out of range", s)
	}
	d = min(d, monthLength(y, mo))
	return epochMillis(s, daysFromCivil(y, mo, d), -off, 0)
}

// epochMillis returns days*86400000 + secs*1000 + ms, or an error where
// Java's toEpochMilli overflows.
func epochMillis(s []byte, days, secs, ms int64) (int64, bool, error) {
	const maxDays = math.MaxInt64/msPerDay - 1
	if days < -maxDays || days > maxDays {
		return 0, true, fmt.Errorf("timestamp %q out of range", s)
	}
	t := days*msPerDay + secs*1000 + ms
	return t, true, nil
}

// parseZone reads what follows a timestamp's time (or date): nothing (the
// server's zone, taken as UTC), Z, +hh, +hhmm or +hh:mm, or after a space
// also UTC, GMT and UT. It returns the offset in seconds east of UTC.
func parseZone(z []byte, dateOnly bool) (int64, bool) {
	if len(z) == 0 {
		return 0, true
	}
	if z[0] == ' ' {
		z = z[1:]
		switch string(z) {
		case "UTC", "GMT", "UT", "Z":
			return 0, true
		}
	}
	if string(z) == "Z" {
		return 0, true
	}
	if len(z) < 3 || z[0] != '+' && z[0] != '-' {
		return 0, false
	}
	c := cursor{s: z, pos: 1}
	h, _, ok := c.digits(2, 2)
	if !ok {
		return 0, false
	}
	var m int64
	if !c.done() {
		c.is(':')
		if m, _, ok = c.digits(2, 2); !ok || !c.done() {
			return 0, false
		}
	}
	if h > 18 || m > 59 || h == 18 && m > 0 {
		return 0, false
	}
	off := h*3600 + m*60
	if z[0] == '-' {
		off = -off
	}
	return off, true
}
