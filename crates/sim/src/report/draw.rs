//! Drawing a [`Chart`] with plotters, as SVG or PNG. Text uses DejaVu Sans
//! embedded in the binary (registered with plotters' `ab_glyph` font table at
//! first use), so drawing needs no system font library.

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};
use std::path::Path;
use std::sync::OnceLock;

const SIZE: (u32, u32) = (900, 560);
const FONT: &str = "sans-serif";
static DEJAVU_SANS: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Okabe–Ito: distinguishable for colour-blind readers and in greyscale print.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(120, 120, 120),
    RGBColor(0, 0, 0),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// What to draw, apart from how: built from the summaries, drawn by any backend.
#[derive(Debug)]
pub(super) struct Chart {
    pub(super) title: String,
    pub(super) x_label: String,
    pub(super) y_label: String,
    /// Top of the y axis; from the data when `None`.
    pub(super) y_max: Option<f64>,
    pub(super) kind: Kind,
}

#[derive(Debug)]
pub(super) enum Kind {
    /// Lines over a numeric x axis.
    Lines(Vec<Series>),
    /// Lines with markers over categories (sweep points); x is the category index.
    PointLines { categories: Vec<String>, series: Vec<Series> },
    /// For each category, a bar per series.
    Bars { categories: Vec<String>, series: Vec<BarSeries> },
}

#[derive(Debug)]
pub(super) struct Series {
    pub(super) name: String,
    pub(super) points: Vec<(f64, f64)>,
    /// Each point drawn as a dot too (a few measured points, not a curve).
    pub(super) marked: bool,
}

#[derive(Debug)]
pub(super) struct BarSeries {
    pub(super) name: String,
    pub(super) values: Vec<Option<f64>>,
    /// Each value's interval, drawn as a whisker (none: no whiskers).
    pub(super) intervals: Vec<Option<[f64; 2]>>,
}
/// Register the embedded font once; every later call returns the first outcome.
fn font_ready() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            register_font(FONT, FontStyle::Normal, DEJAVU_SANS)
                .map_err(|_| "the embedded DejaVu Sans font could not be read".to_string())
        })
        .clone()
}

/// Draw `chart` into `path`, SVG or PNG by its extension.
pub(super) fn draw_file(path: &Path, chart: &Chart) -> Result<(), String> {
    font_ready()?;
    if path.extension().is_some_and(|e| e == "png") {
        draw(BitMapBackend::new(path, SIZE).into_drawing_area(), chart)
    } else {
        draw(SVGBackend::new(path, SIZE).into_drawing_area(), chart)
    }
}

fn fail(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, chart: &Chart) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(fail)?;
    let body = root.titled(&chart.title, (FONT, 22)).map_err(fail)?;
    let entries = legend_entries(&chart.kind);
    // The legend gets its own column on the right, so it never hides data.
    let (plot, side) = if entries.len() < 2 {
        (body, None)
    } else {
        let (plot, side) = body.split_horizontally(
            overbook_core::convert::u32_to_i32(SIZE.0) - legend_width(&entries),
        );
        (plot, Some(side))
    };
    match &chart.kind {
        Kind::Lines(series) => draw_lines(&plot, chart, series)?,
        Kind::PointLines { categories, series } => {
            draw_point_lines(&plot, chart, categories, series)?
        }
        Kind::Bars { categories, series } => draw_bars(&plot, chart, categories, series)?,
    }
    if let Some(side) = side {
        draw_legend(&side, &entries, matches!(chart.kind, Kind::Bars { .. }))?;
    }
    root.present().map_err(fail)
}

/// The named series with their colours.
fn legend_entries(kind: &Kind) -> Vec<(&str, RGBColor)> {
    let names: Vec<&str> = match kind {
        Kind::Lines(series) | Kind::PointLines { series, .. } => {
            series.iter().map(|s| s.name.as_str()).collect()
        }
        Kind::Bars { series, .. } => series.iter().map(|s| s.name.as_str()).collect(),
    };
    names
        .into_iter()
        .enumerate()
        .filter(|(_, n)| !n.is_empty())
        .map(|(i, n)| (n, color(i)))
        .collect()
}

fn legend_width(entries: &[(&str, RGBColor)]) -> i32 {
    let longest = entries.iter().map(|(n, _)| n.chars().count()).max().unwrap_or(0);
    (48 + 8 * overbook_core::convert::usize_to_i32(longest)).clamp(100, 240)
}

/// A line (or a swatch, for bars) and the name of each series, top down.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[(&str, RGBColor)],
    swatches: bool,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let text = TextStyle::from((FONT, 14)).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (name, c)) in entries.iter().enumerate() {
        let y = 32 + 24 * overbook_core::convert::usize_to_i32(i);
        if swatches {
            area.draw(&Rectangle::new([(8, y - 6), (28, y + 6)], c.filled())).map_err(fail)?;
        } else {
            area.draw(&PathElement::new(vec![(6, y), (30, y)], c.stroke_width(3))).map_err(fail)?;
        }
        area.draw(&Text::new(name.to_string(), (36, y), text.clone())).map_err(fail)?;
    }
    Ok(())
}

/// The y axis top: fixed, or 10% above the largest value (at least 1).
fn y_top(chart: &Chart, values: impl Iterator<Item = f64>) -> f64 {
    chart.y_max.unwrap_or_else(|| (values.fold(0.0, f64::max) * 1.1).max(1.0))
}

fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart,
    series: &[Series],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let x_max = series.iter().flat_map(|s| &s.points).map(|p| p.0).fold(0.0, f64::max);
    let x_max = if x_max > 0.0 { x_max * 1.02 } else { 1.0 };
    let y_max = y_top(chart, series.iter().flat_map(|s| &s.points).map(|p| p.1));
    let mut ctx = ChartBuilder::on(area)
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)
        .map_err(fail)?;
    ctx.configure_mesh()
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .label_style((FONT, 14))
        .draw()
        .map_err(fail)?;
    for (i, s) in series.iter().enumerate() {
        let line = LineSeries::new(s.points.iter().copied(), color(i).stroke_width(2));
        ctx.draw_series(line).map_err(fail)?;
        if s.marked {
            let c = color(i);
            ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, c.filled())))
                .map_err(fail)?;
        }
    }
    Ok(())
}

fn draw_point_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart,
    categories: &[String],
    series: &[Series],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let y_max = y_top(chart, series.iter().flat_map(|s| &s.points).map(|p| p.1));
    let mut ctx = category_chart(area, chart, categories, y_max)?;
    for (i, s) in series.iter().enumerate() {
        let c = color(i);
        ctx.draw_series(LineSeries::new(s.points.iter().copied(), c.stroke_width(2)))
            .map_err(fail)?;
        ctx.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, c.filled()))).map_err(fail)?;
    }
    Ok(())
}

fn draw_bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    chart: &Chart,
    categories: &[String],
    series: &[BarSeries],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let y_max = y_top(chart, series.iter().flat_map(|s| s.values.iter().flatten().copied()));
    let mut ctx = category_chart(area, chart, categories, y_max)?;
    let width = 0.8 / series.len().max(1) as f64;
    for (j, s) in series.iter().enumerate() {
        let c = color(j);
        let bars = s.values.iter().enumerate().filter_map(|(i, v)| {
            let x0 = i as f64 - 0.4 + j as f64 * width;
            v.map(|v| Rectangle::new([(x0, 0.0), (x0 + width * 0.9, v)], c.filled()))
        });
        ctx.draw_series(bars).map_err(fail)?;
        let whiskers = s.intervals.iter().enumerate().filter_map(|(i, iv)| {
            let [lo, hi] = (*iv)?;
            let x = i as f64 - 0.4 + j as f64 * width + width * 0.45;
            let (lo, hi) = (lo.clamp(0.0, y_max), hi.clamp(0.0, y_max));
            let cap = width * 0.25;
            Some(PathElement::new(
                vec![(x - cap, lo), (x + cap, lo), (x, lo), (x, hi), (x - cap, hi), (x + cap, hi)],
                BLACK.stroke_width(1),
            ))
        });
        ctx.draw_series(whiskers).map_err(fail)?;
    }
    Ok(())
}

/// Both axes numeric: categories sit at x = 0, 1, ...
type Xy = Cartesian2d<RangedCoordf64, RangedCoordf64>;

/// Axes with the categories at x = 0, 1, ... labelled by name.
fn category_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    chart: &Chart,
    categories: &[String],
    y_max: f64,
) -> Result<ChartContext<'a, DB, Xy>, String>
where
    DB::ErrorType: 'static,
{
    let n = categories.len().max(1);
    let mut ctx = ChartBuilder::on(area)
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..y_max)
        .map_err(fail)?;
    let label = |x: &f64| {
        let i = x.round();
        let at_category = (x - i).abs() < 1e-6 && i >= 0.0;
        at_category
            .then(|| categories.get(overbook_core::convert::to_usize(i)).cloned())
            .flatten()
            .unwrap_or_default()
    };
    ctx.configure_mesh()
        .disable_x_mesh()
        .x_labels(4 * n + 1)
        .x_label_formatter(&label)
        .x_desc(&chart.x_label)
        .y_desc(&chart.y_label)
        .label_style((FONT, 14))
        .draw()
        .map_err(fail)?;
    Ok(ctx)
}
