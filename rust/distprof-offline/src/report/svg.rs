//! A minimal SVG writer: elements, escaping, scales, ticks and axes.
//!
//! Every coordinate passes through [`Svg`]'s methods, which drop an element whose numbers
//! are not finite (and count it) instead of writing `NaN`, which browsers reject silently.
//! Numbers are written with one decimal: a tenth of a pixel is below what a screen shows
//! and keeps large plots small.

use std::fmt::Write;

/// Escapes text for HTML and SVG content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Writes `v` with at most one decimal; the caller guarantees it is finite.
fn num(out: &mut String, v: f64) {
    let r = (v * 10.0).round() / 10.0;
    if r == r.trunc() {
        let _ = write!(out, "{}", r as i64);
    } else {
        let _ = write!(out, "{r:.1}");
    }
}

fn finite(values: &[f64]) -> bool {
    values.iter().all(|v| v.is_finite())
}

/// An SVG document under construction.
pub struct Svg {
    out: String,
    /// Elements dropped because a coordinate was not finite.
    pub dropped: usize,
}

impl Svg {
    /// Starts an SVG of `width` x `height` pixels; `label` is its accessible title.
    pub fn new(width: f64, height: f64, label: &str) -> Svg {
        let mut out = String::new();
        out.push_str("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"");
        num(&mut out, width);
        out.push_str("\" height=\"");
        num(&mut out, height);
        out.push_str("\" viewBox=\"0 0 ");
        num(&mut out, width);
        out.push(' ');
        num(&mut out, height);
        out.push_str("\" role=\"img\"><title>");
        out.push_str(&escape(label));
        out.push_str("</title>");
        Svg { out, dropped: 0 }
    }

    /// A rectangle; `attrs` is trusted markup written by this module's callers.
    pub fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, attrs: &str) {
        self.rect_titled(x, y, w, h, attrs, None);
    }

    /// A rectangle with a tooltip.
    pub fn rect_titled(
        &mut self,
        x: f64,
        y: f64,
        w: f64,
        h: f64,
        attrs: &str,
        tooltip: Option<&str>,
    ) {
        if !finite(&[x, y, w, h]) {
            self.dropped += 1;
            return;
        }
        let (x, w) = if w < 0.0 { (x + w, -w) } else { (x, w) };
        let (y, h) = if h < 0.0 { (y + h, -h) } else { (y, h) };
        self.out.push_str("<rect x=\"");
        num(&mut self.out, x);
        self.out.push_str("\" y=\"");
        num(&mut self.out, y);
        self.out.push_str("\" width=\"");
        num(&mut self.out, w);
        self.out.push_str("\" height=\"");
        num(&mut self.out, h);
        self.out.push_str("\" ");
        self.out.push_str(attrs);
        self.close_with(tooltip, "rect");
    }

    pub fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, attrs: &str) {
        if !finite(&[x1, y1, x2, y2]) {
            self.dropped += 1;
            return;
        }
        self.out.push_str("<line x1=\"");
        num(&mut self.out, x1);
        self.out.push_str("\" y1=\"");
        num(&mut self.out, y1);
        self.out.push_str("\" x2=\"");
        num(&mut self.out, x2);
        self.out.push_str("\" y2=\"");
        num(&mut self.out, y2);
        self.out.push_str("\" ");
        self.out.push_str(attrs);
        self.out.push_str("/>");
    }

    pub fn circle(&mut self, cx: f64, cy: f64, r: f64, attrs: &str, tooltip: Option<&str>) {
        if !finite(&[cx, cy, r]) {
            self.dropped += 1;
            return;
        }
        self.out.push_str("<circle cx=\"");
        num(&mut self.out, cx);
        self.out.push_str("\" cy=\"");
        num(&mut self.out, cy);
        self.out.push_str("\" r=\"");
        num(&mut self.out, r);
        self.out.push_str("\" ");
        self.out.push_str(attrs);
        self.close_with(tooltip, "circle");
    }

    /// Text; `text` is escaped here.
    pub fn text(&mut self, x: f64, y: f64, text: &str, attrs: &str) {
        if !finite(&[x, y]) {
            self.dropped += 1;
            return;
        }
        self.out.push_str("<text x=\"");
        num(&mut self.out, x);
        self.out.push_str("\" y=\"");
        num(&mut self.out, y);
        self.out.push_str("\" ");
        self.out.push_str(attrs);
        self.out.push('>');
        self.out.push_str(&escape(text));
        self.out.push_str("</text>");
    }

    /// A path from a [`PathData`]; nothing is written when it is empty.
    pub fn path(&mut self, d: &PathData, attrs: &str, tooltip: Option<&str>) {
        self.dropped += d.dropped;
        if d.d.is_empty() {
            return;
        }
        self.out.push_str("<path d=\"");
        self.out.push_str(&d.d);
        self.out.push_str("\" ");
        self.out.push_str(attrs);
        self.close_with(tooltip, "path");
    }

    /// Raw markup written by this module's callers (e.g. `<g>` groups).
    pub fn raw(&mut self, markup: &str) {
        self.out.push_str(markup);
    }

    fn close_with(&mut self, tooltip: Option<&str>, element: &str) {
        match tooltip {
            Some(t) => {
                self.out.push_str("><title>");
                self.out.push_str(&escape(t));
                self.out.push_str("</title></");
                self.out.push_str(element);
                self.out.push('>');
            }
            None => self.out.push_str("/>"),
        }
    }

    pub fn finish(mut self) -> String {
        self.out.push_str("</svg>");
        self.out
    }
}

/// Path data under construction; non-finite points are dropped and counted.
#[derive(Default)]
pub struct PathData {
    d: String,
    dropped: usize,
}

impl PathData {
    pub fn new() -> PathData {
        PathData::default()
    }

    pub fn move_to(&mut self, x: f64, y: f64) {
        self.cmd('M', x, y);
    }

    pub fn line_to(&mut self, x: f64, y: f64) {
        self.cmd('L', x, y);
    }

    /// A zero-length segment: drawn as a dot by a path with `stroke-linecap="round"`, a
    /// fifth of the bytes of a `<circle>` per point.
    pub fn dot(&mut self, x: f64, y: f64) {
        if self.cmd('M', x, y) {
            self.d.push_str("h0");
        }
    }

    pub fn close(&mut self) {
        if !self.d.is_empty() {
            self.d.push('Z');
        }
    }

    fn cmd(&mut self, c: char, x: f64, y: f64) -> bool {
        if !finite(&[x, y]) {
            self.dropped += 1;
            return false;
        }
        self.d.push(c);
        num(&mut self.d, x);
        self.d.push(' ');
        num(&mut self.d, y);
        true
    }
}

/// A linear map from data values to pixels.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    pub d0: f64,
    pub d1: f64,
    pub r0: f64,
    pub r1: f64,
}

impl Scale {
    /// A scale over `[d0, d1]`; an empty or non-finite domain is widened so that the map
    /// stays finite.
    pub fn new(d0: f64, d1: f64, r0: f64, r1: f64) -> Scale {
        let (mut d0, mut d1) = if d0.is_finite() && d1.is_finite() {
            (d0, d1)
        } else {
            (0.0, 1.0)
        };
        if d1 - d0 <= f64::EPSILON * d0.abs().max(1.0) {
            let pad = (d0.abs() * 1e-6).max(1.0);
            d0 -= pad;
            d1 += pad;
        }
        Scale { d0, d1, r0, r1 }
    }

    pub fn map(&self, v: f64) -> f64 {
        self.r0 + (v - self.d0) / (self.d1 - self.d0) * (self.r1 - self.r0)
    }

    /// `map`, clamped to the range: points beyond the plot are drawn on its edge.
    pub fn map_clamped(&self, v: f64) -> f64 {
        let (lo, hi) = if self.r0 < self.r1 {
            (self.r0, self.r1)
        } else {
            (self.r1, self.r0)
        };
        self.map(v).clamp(lo, hi)
    }
}

/// About `count` round tick values covering `[lo, hi]` (steps of 1, 2 or 5 times a power
/// of ten), with the step.
pub fn nice_ticks(lo: f64, hi: f64, count: usize) -> (Vec<f64>, f64) {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo || count == 0 {
        return (Vec::new(), 1.0);
    }
    let raw = (hi - lo) / count as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    let ticks = (first..=last).map(|i| i as f64 * step).collect();
    (ticks, step)
}

/// A unit for nanosecond quantities of magnitude `span_ns`: name and divisor.
pub fn unit_for_ns(span_ns: f64) -> (&'static str, f64) {
    let a = span_ns.abs();
    if a >= 1e9 {
        ("s", 1e9)
    } else if a >= 1e6 {
        ("ms", 1e6)
    } else if a >= 1e3 {
        ("µs", 1e3)
    } else {
        ("ns", 1.0)
    }
}

/// A value formatted with just enough decimals for ticks `step` apart (same unit).
pub fn fmt_tick(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    let s = format!("{v:.decimals$}");
    if s == "-0" {
        "0".to_string()
    } else {
        s
    }
}

/// A nanosecond value for a person: `12.3 µs`, `-4.56 ms`; `–` for non-finite.
pub fn fmt_ns(v: f64) -> String {
    if !v.is_finite() {
        return "–".to_string();
    }
    let (unit, div) = unit_for_ns(v);
    let x = v / div;
    let decimals = if x.abs() >= 100.0 {
        0
    } else if x.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{x:.decimals$} {unit}")
}

/// Width of one character of a tick label (11 px system-ui, digits and signs), px.
const TICK_CHAR_PX: f64 = 6.5;
/// The rotated y title's column (12 px text centred at x = 12) and its gap to the labels, px.
const Y_TITLE_PX: f64 = 22.0;
/// Between a tick label's end and the plot's left edge (labels end 4 px before it), px.
const Y_LABEL_GAP_PX: f64 = 4.0;
/// Tick count asked of `nice_ticks` on y.
const Y_TICKS: usize = 5;

/// A frame with axes: the plot area and the two scales.
pub struct Frame {
    pub left: f64,
    pub top: f64,
    pub width: f64,
    pub height: f64,
    pub x: Scale,
    pub y: Scale,
}

/// Axis labelling for one axis: a title and a divisor from data units to shown units.
pub struct AxisSpec<'a> {
    pub title: &'a str,
    pub divisor: f64,
}

impl Frame {
    /// A frame inside an SVG of `w` x `h` with room for tick labels on the left and below.
    pub fn new(w: f64, h: f64, x: (f64, f64), y: (f64, f64)) -> Frame {
        let (left, top, right, bottom) = (62.0, 10.0, 12.0, 34.0);
        let width = (w - left - right).max(10.0);
        let height = (h - top - bottom).max(10.0);
        Frame {
            left,
            top,
            width,
            height,
            x: Scale::new(x.0, x.1, left, left + width),
            y: Scale::new(y.0, y.1, top + height, top),
        }
    }

    pub fn right(&self) -> f64 {
        self.left + self.width
    }

    pub fn bottom(&self) -> f64 {
        self.top + self.height
    }

    /// A full-height band of the plot from `x0` to `x1` (pixels), in CSS class `class`.
    pub fn band(&self, svg: &mut Svg, x0: f64, x1: f64, class: &str) {
        svg.rect(x0, self.top, x1 - x0, self.height, class);
    }

    /// The left margin that fits the y tick labels of this frame's domain shown divided by
    /// `divisor` between the rotated y title and the plot, and never less than now.
    pub fn left_for_y_labels(&self, divisor: f64) -> f64 {
        let (yt, step) = nice_ticks(self.y.d0 / divisor, self.y.d1 / divisor, Y_TICKS);
        let widest = yt.iter().map(|t| fmt_tick(*t, step).chars().count()).max().unwrap_or(0);
        (Y_TITLE_PX + widest as f64 * TICK_CHAR_PX + Y_LABEL_GAP_PX).max(self.left)
    }

    /// Moves the plot's left edge to `left` (keeping its right edge), as room for tick labels.
    pub fn set_left(&mut self, left: f64) {
        let right = self.right();
        self.left = left;
        self.width = (right - left).max(10.0);
        self.x = Scale::new(self.x.d0, self.x.d1, left, left + self.width);
    }

    /// The axes of a quantity in ns (titled `y_what` and shown in the unit that suits
    /// `y_span_ns`) against time in seconds (titled `x_title`).
    pub fn draw_time_axes(&self, svg: &mut Svg, x_title: &str, y_what: &str, y_span_ns: f64) {
        let (unit, div) = unit_for_ns(y_span_ns);
        let y_title = format!("{y_what} ({unit})");
        self.draw_axes(svg, &AxisSpec { title: x_title, divisor: 1e9 }, &AxisSpec { title: &y_title, divisor: div });
    }

    /// Grid, tick labels and axis titles.
    pub fn draw_axes(&self, svg: &mut Svg, xs: &AxisSpec<'_>, ys: &AxisSpec<'_>) {
        svg.rect(
            self.left,
            self.top,
            self.width,
            self.height,
            "class=\"frame\"",
        );
        let (xt, xstep) = nice_ticks(self.x.d0 / xs.divisor, self.x.d1 / xs.divisor, 6);
        for t in xt {
            let px = self.x.map(t * xs.divisor);
            svg.line(px, self.top, px, self.bottom(), "class=\"grid\"");
            svg.text(
                px,
                self.bottom() + 13.0,
                &fmt_tick(t, xstep),
                "class=\"tick\" text-anchor=\"middle\"",
            );
        }
        let (yt, ystep) = nice_ticks(self.y.d0 / ys.divisor, self.y.d1 / ys.divisor, Y_TICKS);
        for t in yt {
            let py = self.y.map(t * ys.divisor);
            svg.line(self.left, py, self.right(), py, "class=\"grid\"");
            svg.text(
                self.left - 4.0,
                py + 4.0,
                &fmt_tick(t, ystep),
                "class=\"tick\" text-anchor=\"end\"",
            );
        }
        svg.text(
            self.left + self.width / 2.0,
            self.bottom() + 28.0,
            xs.title,
            "class=\"axis\" text-anchor=\"middle\"",
        );
        let ty = self.top + self.height / 2.0;
        let mut rotated =
            String::from("class=\"axis\" text-anchor=\"middle\" transform=\"rotate(-90 12 ");
        num(&mut rotated, ty);
        rotated.push_str(")\"");
        svg.text(12.0, ty, ys.title, &rotated);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_neutralises_markup() {
        assert_eq!(
            escape("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
        let mut svg = Svg::new(10.0, 10.0, "</title><script>");
        svg.text(1.0, 1.0, "<b>&", "");
        let out = svg.finish();
        assert!(!out.contains("<script>"), "{out}");
        assert!(out.contains("&lt;b&gt;&amp;"), "{out}");
    }

    #[test]
    fn non_finite_coordinates_are_dropped_not_written() {
        let mut svg = Svg::new(100.0, 100.0, "t");
        svg.rect(f64::NAN, 0.0, 1.0, 1.0, "");
        svg.line(0.0, 0.0, f64::INFINITY, 1.0, "");
        svg.circle(1.0, 1.0, f64::NEG_INFINITY, "", None);
        svg.text(f64::NAN, 1.0, "x", "");
        let mut d = PathData::new();
        d.move_to(1.0, 2.0);
        d.line_to(f64::NAN, 3.0);
        d.dot(4.0, 5.0);
        svg.path(&d, "", None);
        assert_eq!(svg.dropped, 5);
        let out = svg.finish();
        assert!(!out.contains("NaN") && !out.contains("inf"), "{out}");
        assert!(out.contains("d=\"M1 2M4 5h0\""), "{out}");
    }

    #[test]
    fn scale_of_empty_domain_stays_finite() {
        let s = Scale::new(5.0, 5.0, 0.0, 100.0);
        assert!(s.map(5.0).is_finite());
        assert!((s.map(5.0) - 50.0).abs() < 1e-9);
        let s = Scale::new(f64::NAN, 1.0, 0.0, 100.0);
        assert!(s.map(0.5).is_finite());
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        let (t, step) = nice_ticks(0.0, 97.0, 5);
        assert_eq!(step, 20.0);
        assert_eq!(t, vec![0.0, 20.0, 40.0, 60.0, 80.0]);
        let (t, step) = nice_ticks(-0.013, 0.021, 4);
        assert_eq!(step, 0.01);
        assert_eq!(t.len(), 4);
        assert_eq!(fmt_tick(-0.01, step), "-0.01");
        assert_eq!(fmt_ns(12_345.0), "12.3 µs");
        assert_eq!(fmt_ns(-4_560_000.0), "-4.56 ms");
        assert_eq!(fmt_ns(f64::NAN), "–");
    }
}
