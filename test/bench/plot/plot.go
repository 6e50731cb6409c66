// Package plot renders simple PNG line charts for cqlguard benchmark results
// using only the standard library, so bench reports need no extra dependencies.
package plot

import (
	"cmp"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strconv"
	"strings"
)

// Series is one line: Y values at X positions (seconds), drawn in Color.
// Points where X or Y is NaN or infinite are skipped and break the line.
// A zero Color picks one from a built-in palette.
type Series struct {
	Name  string
	X, Y  []float64
	Color color.RGBA
}

// Marker is a vertical line at X with a label, e.g. a phase boundary.
type Marker struct {
	X     float64
	Label string
}

// Chart describes a chart.
type Chart struct {
	Title, XLabel, YLabel string
	Width, Height         int // pixels; 0 means 1000x500
	Series                []Series
	Markers               []Marker
	// YMin is the bottom of the Y axis, usually 0. When YMax is 0 it is
	// computed from the data with about 10% headroom, and YMin is lowered
	// if the data goes below it.
	YMin float64
	YMax float64
}

// MinSize is the smallest width or height, in pixels, that WritePNG accepts.
const MinSize = 100

const (
	pad     = 8 // outer padding in pixels
	tickLen = 5
)

var (
	white     = color.RGBA{255, 255, 255, 255}
	black     = color.RGBA{0, 0, 0, 255}
	gray      = color.RGBA{128, 128, 128, 255}
	lightGray = color.RGBA{225, 225, 225, 255}
	palette   = [...]color.RGBA{
		{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255},
		{255, 127, 14, 255}, {148, 103, 189, 255}, {140, 86, 75, 255},
	}
)

// WritePNG renders c to w.
func (c Chart) WritePNG(w io.Writer) error {
	if width, height := c.size(); width < MinSize || height < MinSize {
		return fmt.Errorf("plot: chart size %dx%d is below the %dx%d minimum", width, height, MinSize, MinSize)
	}
	if err := png.Encode(w, c.Render()); err != nil {
		return fmt.Errorf("plot: encode png: %w", err)
	}
	return nil
}

// Render returns the image. A chart smaller than MinSize in either
// dimension comes back blank, since WritePNG rejects it anyway.
func (c Chart) Render() *image.RGBA {
	w, h := c.size()
	img := image.NewRGBA(image.Rect(0, 0, max(w, 1), max(h, 1)))
	fill(img, img.Rect, white)
	if w < MinSize || h < MinSize {
		return img
	}
	f := c.layout(w, h)
	p, s := f.plot, f.scale

	for _, v := range f.yTicks {
		_, py := f.pt(0, v)
		y := int(math.Round(py))
		fill(img, image.Rect(p.Min.X, y, p.Max.X, y+1), lightGray)
		fill(img, image.Rect(p.Min.X-tickLen, y, p.Min.X, y+1), black)
		l := formatTick(v, f.yStep, true)
		drawText(img, p.Min.X-tickLen-4-textWidth(l, s), y-7*s/2, l, s, black, false)
	}
	for _, v := range f.xTicks {
		px, _ := f.pt(v, 0)
		x := int(math.Round(px))
		vline(img, x, p.Min.Y, p.Max.Y, lightGray, false)
		vline(img, x, p.Max.Y, p.Max.Y+tickLen, black, false)
		l := formatTick(v, f.xStep, false)
		drawText(img, x-textWidth(l, s)/2, p.Max.Y+tickLen+4, l, s, black, false)
	}

	for i, m := range c.Markers {
		if row := f.markerRow[i]; row >= 0 {
			x := f.markerX[i]
			vline(img, x, p.Min.Y, p.Max.Y, gray, true)
			drawText(img, x-textWidth(m.Label, s)/2, p.Min.Y-(row+1)*f.lineH, m.Label, s, gray, false)
		}
	}

	for i, sr := range c.Series {
		col := seriesColor(sr, i)
		n := min(len(sr.X), len(sr.Y))
		ok := func(j int) bool { return j >= 0 && j < n && finite(sr.X[j]) && finite(sr.Y[j]) }
		for j := range n {
			if !ok(j) {
				continue
			}
			ax, ay := f.pt(sr.X[j], sr.Y[j])
			if ok(j + 1) {
				bx, by := f.pt(sr.X[j+1], sr.Y[j+1])
				line(img, p, ax, ay, bx, by, col)
			} else if !ok(j-1) && image.Pt(int(ax), int(ay)).In(p) { // a lone point becomes a dot
				fill(img, image.Rect(int(ax)-2, int(ay)-2, int(ax)+3, int(ay)+3), col)
			}
		}
	}

	// Axes go over the grid and data; text over everything.
	vline(img, p.Min.X, p.Min.Y, p.Max.Y, black, false)
	fill(img, image.Rect(p.Min.X, p.Max.Y, p.Max.X+1, p.Max.Y+1), black)
	ts := s + 1
	if textWidth(c.Title, ts) > w-2*pad {
		ts = s
	}
	drawText(img, max(pad, (w-textWidth(c.Title, ts))/2), pad, c.Title, ts, black, false)
	drawText(img, p.Min.X+(p.Dx()-textWidth(c.XLabel, s))/2, h-pad-f.lineH, c.XLabel, s, black, false)
	drawText(img, pad, p.Min.Y+(p.Dy()+textWidth(c.YLabel, s))/2, c.YLabel, s, black, true)
	c.drawLegend(img, f)
	return img
}

func (c Chart) drawLegend(img *image.RGBA, f *frame) {
	s := f.scale
	var names []string
	var cols []color.RGBA
	wmax := 0
	for i, sr := range c.Series {
		if sr.Name != "" {
			names, cols = append(names, sr.Name), append(cols, seriesColor(sr, i))
			wmax = max(wmax, textWidth(sr.Name, s))
		}
	}
	if len(names) == 0 {
		return
	}
	size := image.Pt(19*s+wmax, 3*s+len(names)*f.lineH)
	box := image.Rectangle{Max: size}.Add(image.Pt(f.plot.Max.X-size.X-4*s, f.plot.Min.Y+4*s))
	fill(img, box.Inset(-1), gray)
	fill(img, box, white)
	for i, n := range names {
		x, y := box.Min.X+4*s, box.Min.Y+3*s+i*f.lineH
		fill(img, image.Rect(x, y, x+7*s, y+7*s), cols[i])
		drawText(img, x+11*s, y, n, s, black, false)
	}
}

// frame maps data coordinates to pixels and holds the computed layout.
type frame struct {
	plot               image.Rectangle
	x0, x1, y0, y1     float64
	xTicks, yTicks     []float64
	xStep, yStep       float64
	scale, lineH       int
	markerX, markerRow []int // markerRow is -1 for markers off the X range
}

// pt converts a data point to fractional pixel coordinates.
func (f *frame) pt(x, y float64) (float64, float64) {
	return float64(f.plot.Min.X) + (x-f.x0)/(f.x1-f.x0)*float64(f.plot.Dx()),
		float64(f.plot.Max.Y) - (y-f.y0)/(f.y1-f.y0)*float64(f.plot.Dy())
}

func (c Chart) size() (w, h int) { return cmp.Or(c.Width, 1000), cmp.Or(c.Height, 500) }

// layout computes ranges, ticks and the plot rectangle for a w x h image.
func (c Chart) layout(w, h int) *frame {
	f := &frame{scale: 1}
	if w >= 800 && h >= 400 {
		f.scale = 2
	}
	s := f.scale
	f.lineH = 9 * s // 7 rows of glyph plus 2 for descenders
	f.x0, f.x1, f.y0, f.y1 = c.ranges()
	f.xStep, f.xTicks = ticks(f.x0, f.x1)
	f.yStep, f.yTicks = ticks(f.y0, f.y1)

	left := 0
	for _, v := range f.yTicks {
		left = max(left, textWidth(formatTick(v, f.yStep, true), s))
	}
	left += pad + tickLen + 4
	if c.YLabel != "" {
		left += f.lineH + pad
	}
	bottom := h - pad - tickLen - 4 - f.lineH
	if c.XLabel != "" {
		bottom -= f.lineH + pad
	}
	// The right margin leaves room for half of a last X tick label.
	f.plot = image.Rect(left, 0, max(left+1, w-pad-24*s), max(1, bottom))

	// Marker labels sit in rows above the plot; a label drops a row when
	// it would overlap one already placed.
	var ends []int // right edge of the last label in each row
	for _, m := range c.Markers {
		px, _ := f.pt(m.X, 0)
		x, row := int(math.Round(px)), -1
		if finite(m.X) && m.X >= f.x0 && m.X <= f.x1 {
			half := textWidth(m.Label, s) / 2
			for row = 0; row < len(ends) && x-half < ends[row]+3*s; row++ {
			}
			if row == len(ends) {
				ends = append(ends, 0)
			}
			ends[row] = x + half
		}
		f.markerX, f.markerRow = append(f.markerX, x), append(f.markerRow, row)
	}
	top := pad + 9*(s+1) + pad + len(ends)*f.lineH
	f.plot.Min.Y = min(top, f.plot.Max.Y-1)
	return f
}

// ranges returns the data bounds of the axes, never of zero width.
func (c Chart) ranges() (x0, x1, y0, y1 float64) {
	x0, x1, y0, y1 = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for j := range min(len(s.X), len(s.Y)) {
			if finite(s.X[j]) && finite(s.Y[j]) {
				x0, x1 = min(x0, s.X[j]), max(x1, s.X[j])
				y0, y1 = min(y0, s.Y[j]), max(y1, s.Y[j])
			}
		}
	}
	for _, m := range c.Markers {
		if finite(m.X) {
			x0, x1 = min(x0, m.X), max(x1, m.X)
		}
	}
	switch {
	case x0 > x1:
		x0, x1 = 0, 1
	case x0 == x1:
		d := max(math.Abs(x0)*0.1, 0.5)
		x0, x1 = x0-d, x1+d
	}

	lo, hi := c.YMin, c.YMax
	if !finite(lo) {
		lo = 0
	}
	if hi == 0 || !finite(hi) {
		if y0 > y1 { // no data
			y0, y1 = lo, lo
		}
		span := max(y1, lo) - min(y0, lo)
		if span == 0 {
			span = max(math.Abs(lo), 1)
		}
		if y0 < lo {
			lo = y0 - 0.1*span
		}
		hi = max(y1, lo) + 0.1*span
	}
	if hi <= lo {
		hi = lo + 1
	}
	return x0, x1, lo, hi
}

// ticks picks a 1, 2 or 5 x 10^n step giving about five ticks in [lo, hi]
// and returns it with the tick values.
func ticks(lo, hi float64) (float64, []float64) {
	raw := (hi - lo) / 5
	if !finite(raw) || raw <= 0 {
		return 0, nil
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{5, 2, 1} {
		if raw <= m*mag {
			step = m * mag
		}
	}
	var vs []float64
	start := math.Ceil(lo/step) * step
	for i := 0; i < 20 && start+float64(i)*step <= hi+step*1e-9; i++ {
		v := start + float64(i)*step
		if math.Abs(v) < step*1e-9 {
			v = 0 // avoid "-0" and 1e-17 from accumulated rounding
		}
		vs = append(vs, v)
	}
	return step, vs
}

// formatTick formats a tick value with just enough decimals for step.
// Compact labels use k, M, G and T suffixes, so 12000 is "12k".
func formatTick(v, step float64, compact bool) string {
	unit, suffix := 1.0, ""
	for i, sfx := range []string{"T", "G", "M", "k"} {
		if u := math.Pow(10, float64(12-3*i)); compact && math.Abs(v) >= u {
			unit, suffix = u, sfx
			break
		}
	}
	dec := 0
	if step > 0 {
		dec = max(0, min(10, int(math.Ceil(-math.Log10(step/unit)-1e-9))))
	}
	l := strconv.FormatFloat(v/unit, 'f', dec, 64)
	if strings.Contains(l, ".") {
		l = strings.TrimRight(strings.TrimRight(l, "0"), ".")
	}
	if l == "-0" {
		l = "0"
	}
	return l + suffix
}

func seriesColor(s Series, i int) color.RGBA {
	if s.Color == (color.RGBA{}) {
		return palette[i%len(palette)]
	}
	return s.Color
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// vline draws a vertical line from y0 to y1, dashed in 4-pixel steps if asked.
func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA, dashed bool) {
	for y := y0; y <= y1; y++ {
		if !dashed || (y-y0)/4%2 == 0 {
			img.SetRGBA(x, y, c)
		}
	}
}

// line draws a 2-pixel-wide segment between fractional pixel positions.
// It clips to r first so that far-off points cannot make it loop for long.
func line(img *image.RGBA, r image.Rectangle, ax, ay, bx, by float64, c color.RGBA) {
	ax, ay, bx, by, ok := clip(r, ax, ay, bx, by)
	if !ok {
		return
	}
	n := math.Ceil(max(math.Abs(bx-ax), math.Abs(by-ay)))
	lim := r.Inset(-1)
	for i := 0.0; i <= n; i++ {
		t := i / max(n, 1)
		x, y := int(math.Round(ax+t*(bx-ax))), int(math.Round(ay+t*(by-ay)))
		fill(img, image.Rect(x, y, x+2, y+2).Intersect(lim), c)
	}
}

// clip is Liang-Barsky clipping of the segment a-b to r.
func clip(r image.Rectangle, ax, ay, bx, by float64) (float64, float64, float64, float64, bool) {
	if !finite(ax) || !finite(ay) || !finite(bx) || !finite(by) {
		return 0, 0, 0, 0, false
	}
	t0, t1 := 0.0, 1.0
	dx, dy := bx-ax, by-ay
	for _, pq := range [4][2]float64{
		{-dx, ax - float64(r.Min.X)}, {dx, float64(r.Max.X) - ax},
		{-dy, ay - float64(r.Min.Y)}, {dy, float64(r.Max.Y) - ay},
	} {
		p, q := pq[0], pq[1]
		switch {
		case p == 0 && q < 0:
			return 0, 0, 0, 0, false
		case p < 0:
			t0 = max(t0, q/p)
		case p > 0:
			t1 = min(t1, q/p)
		}
	}
	if t0 > t1 {
		return 0, 0, 0, 0, false
	}
	return ax + t0*dx, ay + t0*dy, ax + t1*dx, ay + t1*dy, true
}

// textWidth is the width in pixels of s drawn at scale.
func textWidth(s string, scale int) int {
	return max(0, 6*len([]rune(s))-1) * scale
}

// drawText draws s with its top-left corner at (x, y). Vertical text reads
// bottom to top, starting at (x, y) and going up.
func drawText(img *image.RGBA, x, y int, s string, scale int, c color.RGBA, vertical bool) {
	for i, r := range []rune(s) {
		g, drop := glyph(r)
		for row := range 7 {
			for col := range 5 {
				if g>>(8*(6-row)+4-col)&1 == 0 {
					continue
				}
				px, py := x+(6*i+col)*scale, y+(row+drop)*scale
				if vertical {
					px, py = x+(row+drop)*scale, y-(6*i+col+1)*scale
				}
				fill(img, image.Rect(px, py, px+scale, py+scale), c)
			}
		}
	}
}

// glyph returns the bitmap for r, or the one for '?' if there is none, and
// how many rows lower to draw it: letters with descenders are stored raised.
func glyph(r rune) (uint64, int) {
	if r < 0 || int(r) >= len(font) || font[r] == 0 && r != ' ' {
		r = '?'
	}
	if strings.ContainsRune("gpqy", r) {
		return font[r], 2
	}
	return font[r], 0
}

// font holds 5x7 glyphs, one byte per row with the top row as the most
// significant; within a row, bit 4 is the leftmost pixel.
var font = [128]uint64{
	'0': 0x0e11131519110e, '1': 0x040c040404040e, '2': 0x0e11010204081f, '3': 0x1f02040201110e,
	'4': 0x02060a121f0202, '5': 0x1f101e0101110e, '6': 0x0608101e11110e, '7': 0x1f010204080808,
	'8': 0x0e11110e11110e, '9': 0x0e11110f01020c, 'A': 0x0e11111f111111, 'B': 0x1e11111e11111e,
	'C': 0x0e11101010110e, 'D': 0x1c12111111121c, 'E': 0x1f10101e10101f, 'F': 0x1f10101e101010,
	'G': 0x0e11101711110f, 'H': 0x1111111f111111, 'I': 0x0e04040404040e, 'J': 0x0702020202120c,
	'K': 0x11121418141211, 'L': 0x1010101010101f, 'M': 0x111b1515111111, 'N': 0x11111915131111,
	'O': 0x0e11111111110e, 'P': 0x1e11111e101010, 'Q': 0x0e11111115120d, 'R': 0x1e11111e141211,
	'S': 0x0f10100e01011e, 'T': 0x1f040404040404, 'U': 0x1111111111110e, 'V': 0x11111111110a04,
	'W': 0x1111111515150a, 'X': 0x11110a040a1111, 'Y': 0x11110a04040404, 'Z': 0x1f01020408101f,
	'a': 0x00000e010f110f, 'b': 0x1010161911111e, 'c': 0x00000e1010110e, 'd': 0x01010d1311110f,
	'e': 0x00000e111f100e, 'f': 0x0609081c080808, 'g': 0x0f1111110f010e, 'h': 0x10101619111111,
	'i': 0x04000c0404040e, 'j': 0x0200060202120c, 'k': 0x10101214181412, 'l': 0x0c04040404040e,
	'm': 0x00001a15151111, 'n': 0x00001619111111, 'o': 0x00000e1111110e, 'p': 0x1e1111111e1010,
	'q': 0x0f1111110f0101, 'r': 0x00001619101010, 's': 0x00000f100e011e, 't': 0x08081c08080906,
	'u': 0x0000111111130d, 'v': 0x00001111110a04, 'w': 0x0000111115150a, 'x': 0x0000110a040a11,
	'y': 0x111111130d010e, 'z': 0x00001f0204081f, '.': 0x00000000000c0c, ',': 0x000000000c0408,
	':': 0x000c0c000c0c00, '/': 0x00010204081000, '%': 0x18190204081303, '-': 0x0000001f000000,
	'+': 0x0004041f040400, '(': 0x02040808080402, ')': 0x08040202020408, '_': 0x0000000000001f,
	'=': 0x00001f001f0000, '!': 0x04040404040004, '?': 0x0e110102040004, '\'': 0x04040800000000,
	'[': 0x0e08080808080e, ']': 0x0e02020202020e, '<': 0x02040810080402, '>': 0x08040201020408,
	'*': 0x0004150e150400,
}
