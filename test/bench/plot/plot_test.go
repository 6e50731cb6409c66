package plot

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
)

var red = color.RGBA{220, 20, 20, 255}

func ramp(n int, f func(float64) float64) (xs, ys []float64) {
	for i := range n {
		x := float64(i)
		xs, ys = append(xs, x), append(ys, f(x))
	}
	return xs, ys
}

func exampleChart() Chart {
	x, y := ramp(121, func(x float64) float64 { return 12000 + 8000*math.Sin(x/15) })
	x2, y2 := ramp(121, func(x float64) float64 { return 3000 + 40*x })
	return Chart{
		Title:  "cqlguard bench: reads/s (p99 <= 5ms)",
		XLabel: "time (s)",
		YLabel: "ops/s",
		Series: []Series{
			{Name: "allowed", X: x, Y: y, Color: color.RGBA{31, 119, 180, 255}},
			{Name: "throttled_hot", X: x2, Y: y2, Color: red},
		},
		Markers: []Marker{{X: 0, Label: "warmup"}, {X: 30, Label: "hot key +50%"}, {X: 33, Label: "limit=2000"}, {X: 90, Label: "cooldown"}},
	}
}

func TestRenderSize(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		name string
		c    Chart
		w, h int
	}{
		{"default", exampleChart(), 1000, 500},
		{"small", Chart{Width: 100, Height: 100, Title: "tiny", Series: exampleChart().Series}, 100, 100},
		{"wide", Chart{Width: 1600, Height: 300, Series: exampleChart().Series}, 1600, 300},
		{"empty", Chart{}, 1000, 500},
		{"empty series", Chart{Series: []Series{{Name: "none"}}}, 1000, 500},
		{"single point", Chart{Series: []Series{{Name: "one", X: []float64{3}, Y: []float64{7}}}}, 1000, 500},
		{"all equal", Chart{Series: []Series{{X: []float64{1, 2, 3}, Y: []float64{5, 5, 5}}}}, 1000, 500},
		{"all zero", Chart{Series: []Series{{X: []float64{1, 2, 3}, Y: []float64{0, 0, 0}}}}, 1000, 500},
		{"zero x width", Chart{Series: []Series{{X: []float64{4, 4}, Y: []float64{1, 9}}}}, 1000, 500},
		{"nan inf", Chart{Series: []Series{{X: []float64{0, 1, nan, 3, inf, 5}, Y: []float64{1, nan, 2, -inf, 3, 4}}}}, 1000, 500},
		{"all nan", Chart{Series: []Series{{X: []float64{nan, nan}, Y: []float64{nan, inf}}}}, 1000, 500},
		{"negative", Chart{Series: []Series{{X: []float64{0, 1, 2}, Y: []float64{-5, 3, -1e6}}}}, 1000, 500},
		{"huge range", Chart{Series: []Series{{X: []float64{-math.MaxFloat64, math.MaxFloat64}, Y: []float64{-math.MaxFloat64, math.MaxFloat64}}}}, 1000, 500},
		{"ymax below data", Chart{YMax: 1, Series: []Series{{X: []float64{0, 1e9}, Y: []float64{-1e300, 1e300}}}}, 1000, 500},
		{"ymax below ymin", Chart{YMin: 10, YMax: 5, Series: exampleChart().Series}, 1000, 500},
		{"mismatched lengths", Chart{Series: []Series{{X: []float64{0, 1, 2}, Y: []float64{1}}}}, 1000, 500},
		{"markers only", Chart{Markers: []Marker{{X: 5, Label: "a"}, {X: nan, Label: "b"}, {X: 5, Label: "c"}}}, 1000, 500},
		{"unknown glyphs", Chart{Title: "héllo ~ {} @#", Width: 300, Height: 200}, 300, 200},
		{"too small", Chart{Width: 50, Height: 500}, 50, 500},
		{"negative size", Chart{Width: -10, Height: -10}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := tt.c.Render()
			if got := img.Bounds().Size(); got != image.Pt(tt.w, tt.h) {
				t.Errorf("size = %v, want %dx%d", got, tt.w, tt.h)
			}
		})
	}
}

// TestSeriesPixel checks that each series is drawn where its points map to.
func TestSeriesPixel(t *testing.T) {
	tests := []struct {
		name string
		c    Chart
		x, y float64 // a point on the first series
	}{
		{"diagonal", Chart{YMax: 100, Series: []Series{{X: []float64{0, 10}, Y: []float64{0, 100}, Color: red}}}, 5, 50},
		{"auto y", Chart{Width: 400, Height: 300, Series: []Series{{X: []float64{0, 10, 20}, Y: []float64{3, 30, 12}, Color: red}}}, 10, 30},
		{"single point", Chart{Series: []Series{{X: []float64{2}, Y: []float64{2}, Color: red}}}, 2, 2},
		{"after nan", Chart{Series: []Series{{X: []float64{0, 1, 2, 3}, Y: []float64{1, math.NaN(), 4, 6}, Color: red}}}, 2.5, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := tt.c.Render()
			w, h := tt.c.size()
			px, py := tt.c.layout(w, h).pt(tt.x, tt.y)
			if !near(img, int(math.Round(px)), int(math.Round(py)), 2, red) {
				t.Errorf("no series pixel near (%.1f, %.1f) for point (%g, %g)", px, py, tt.x, tt.y)
			}
		})
	}
}

func near(img *image.RGBA, x, y, d int, c color.RGBA) bool {
	for dy := -d; dy <= d; dy++ {
		for dx := -d; dx <= d; dx++ {
			if img.RGBAAt(x+dx, y+dy) == c {
				return true
			}
		}
	}
	return false
}

func TestWritePNG(t *testing.T) {
	tests := []struct {
		name    string
		c       Chart
		wantErr bool
	}{
		{"example", exampleChart(), false},
		{"minimum", Chart{Width: 100, Height: 100}, false},
		{"narrow", Chart{Width: 99, Height: 500}, true},
		{"short", Chart{Width: 500, Height: 10}, true},
		{"negative", Chart{Width: -1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := tt.c.WritePNG(&buf)
			if (err != nil) != tt.wantErr {
				t.Fatalf("WritePNG error = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			img, err := png.Decode(&buf)
			if err != nil {
				t.Fatalf("png.Decode: %v", err)
			}
			w, h := tt.c.size()
			if got := img.Bounds().Size(); got != image.Pt(w, h) {
				t.Errorf("decoded size = %v, want %dx%d", got, w, h)
			}
		})
	}
}

func TestWriteExampleFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "example.png")
	writeChart(t, exampleChart(), path)
	// PLOT_EXAMPLE lets a developer keep a copy to look at.
	if p := os.Getenv("PLOT_EXAMPLE"); p != "" {
		writeChart(t, exampleChart(), p)
	}
}

func writeChart(t *testing.T, c Chart, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WritePNG(f); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestFormatTick(t *testing.T) {
	tests := []struct {
		v, step float64
		compact bool
		want    string
	}{
		{12000, 2000, true, "12k"},
		{1500000, 500000, true, "1.5M"},
		{2000000, 500000, true, "2M"},
		{0, 5, true, "0"},
		{500, 500, true, "500"},
		{2.5e9, 5e8, true, "2.5G"},
		{0.30000000000000004, 0.1, false, "0.3"},
		{12000, 2000, false, "12000"},
		{-1500, 500, true, "-1.5k"},
		{-0.0000001, 0.5, false, "0"},
	}
	for _, tt := range tests {
		if got := formatTick(tt.v, tt.step, tt.compact); got != tt.want {
			t.Errorf("formatTick(%v, %v, %v) = %q, want %q", tt.v, tt.step, tt.compact, got, tt.want)
		}
	}
}

func TestTicks(t *testing.T) {
	tests := []struct {
		lo, hi, step float64
		n            int
	}{
		{0, 100, 20, 6},
		{0, 22000, 5000, 5},
		{0, 1, 0.2, 6},
		{-3, 7, 2, 5},
		{0, 0, 0, 0},
	}
	for _, tt := range tests {
		step, vs := ticks(tt.lo, tt.hi)
		if step != tt.step || len(vs) != tt.n {
			t.Errorf("ticks(%v, %v) = %v, %v; want step %v and %d ticks", tt.lo, tt.hi, step, vs, tt.step, tt.n)
		}
	}
}
