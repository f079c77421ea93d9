//! PNG plots (900x600) of the results, drawn with plotters' bitmap backend and the DejaVu Sans
//! font loaded at run time.

use crate::results::{Mode, ModeRun, Parsed, SpeedRow};
use plotters::prelude::*;
use plotters::style::register_font;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const SIZE: (u32, u32) = (900, 600);

/// Loads DejaVu Sans and registers it as plotters' "sans-serif" (once per process).
pub fn init_fonts() -> Result<(), String> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let bytes = std::fs::read(FONT_PATH).map_err(|e| {
            format!("cannot read the plot font {FONT_PATH}: {e}\ninstall it with: apt-get install fonts-dejavu-core")
        })?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| {
            format!("{FONT_PATH} is not a usable font\nreinstall it with: apt-get install --reinstall fonts-dejavu-core")
        })
    })
    .clone()
}

/// Tableau 10.
const COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// Dashed, without markers (reference lines).
    pub dashed: bool,
    /// Per point, an interval (low, high) drawn as a vertical bar with caps; empty: none.
    pub errors: Vec<(f64, f64)>,
}

impl Series {
    /// A dashed line at `y` over `span` (the full cache's value across the budgets).
    pub fn level(label: String, (lo, hi): (f64, f64), y: f64) -> Series {
        Series {
            label,
            points: vec![(lo, y), (hi, y)],
            dashed: true,
            errors: Vec::new(),
        }
    }

    /// The dashed line of `ratio` × budget: a cell's mean length under it is too short for its
    /// budget to be tested.
    pub fn budget_ratio(budgets: &[u32], ratio: f64) -> Series {
        Series {
            label: format!("{ratio} x budget"),
            points: budgets
                .iter()
                .map(|&b| (b as f64, ratio * b as f64))
                .collect(),
            dashed: true,
            errors: Vec::new(),
        }
    }
}

/// A solid line per policy over the budgets, with a point at each budget where `value` has one.
pub fn policy_lines(
    policies: &[String],
    budgets: &[u32],
    value: impl Fn(&str, u32) -> Option<f64>,
) -> Vec<Series> {
    policies
        .iter()
        .map(|p| Series {
            label: p.clone(),
            points: budgets
                .iter()
                .filter_map(|&b| value(p, b).map(|y| (b as f64, y)))
                .collect(),
            dashed: false,
            errors: Vec::new(),
        })
        .collect()
}

/// The smallest and largest budget (1 when there are none): where a level line starts and ends.
pub fn budget_span(budgets: &[u32]) -> (f64, f64) {
    (
        *budgets.iter().min().unwrap_or(&1) as f64,
        *budgets.iter().max().unwrap_or(&1) as f64,
    )
}

/// The factor that moves the points of policy `i` of `n` off their budget on a log2 axis, so
/// that the policies' points and intervals stand side by side instead of hiding one another.
pub fn side_by_side(i: usize, n: usize) -> f64 {
    let n = n.max(1) as f64;
    2f64.powf((i as f64 - (n - 1.0) / 2.0) * 0.03)
}

pub struct Chart<'a> {
    pub path: &'a Path,
    pub title: &'a str,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    /// Plot x on a log2 axis, labelled at powers of two.
    pub x_log2: bool,
    /// Fixed lower / upper y bounds (else from the data).
    pub y_min: Option<f64>,
    pub y_max: Option<f64>,
    pub series: Vec<Series>,
    pub legend: SeriesLabelPosition,
}

fn padded(lo: f64, hi: f64, frac: f64) -> (f64, f64) {
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        let d = if lo.abs() > 1e-9 { lo.abs() * 0.1 } else { 1.0 };
        return (lo - d, hi + d);
    }
    let d = (hi - lo) * frac;
    (lo - d, hi + d)
}

/// A series to draw: its colour index, itself, and its finite points (x transformed).
type Drawn<'a> = (usize, &'a Series, Vec<(f64, f64)>);

/// Draws one line chart with markers and a legend.
pub fn draw_chart(c: &Chart) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plotting {}: {e}", c.path.display());
    let tx = |x: f64| if c.x_log2 { x.log2() } else { x };
    let series: Vec<Drawn> = c
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite() && (!c.x_log2 || *x > 0.0))
                .map(|&(x, y)| (tx(x), y))
                .collect();
            (i, s, pts)
        })
        .filter(|(_, _, pts)| !pts.is_empty())
        .collect();
    // the bars, x transformed: (x, low, high)
    let bars = |s: &Series| -> Vec<(f64, f64, f64)> {
        s.points
            .iter()
            .zip(&s.errors)
            .filter(|((x, _), (lo, hi))| {
                x.is_finite() && lo.is_finite() && hi.is_finite() && (!c.x_log2 || *x > 0.0)
            })
            .map(|(&(x, _), &(lo, hi))| (tx(x), lo, hi))
            .collect()
    };
    let all = || series.iter().flat_map(|(_, _, p)| p.iter());
    let (x0, x1) = padded(
        all().map(|p| p.0).fold(f64::INFINITY, f64::min),
        all().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max),
        0.05,
    );
    let (mut y0, mut y1) = padded(
        all().map(|p| p.1).fold(f64::INFINITY, f64::min),
        all().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max),
        0.08,
    );
    if let Some(v) = c.y_min {
        y0 = v;
    }
    match c.y_max {
        Some(v) => y1 = v.max(y0 + 1e-9),
        // Room for the legend above the data.
        None => y1 += (y1 - y0) * 0.12,
    }

    let root = BitMapBackend::new(c.path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(c.title, ("sans-serif", 24))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|e| err(&e))?;
    let log2 = c.x_log2;
    let x_fmt = move |x: &f64| {
        if !log2 {
            format!("{x}")
        } else if (x - x.round()).abs() < 1e-6 {
            format!("{}", 2f64.powf(x.round()).round())
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_desc(c.x_desc)
        .y_desc(c.y_desc)
        .x_labels(if log2 {
            ((x1 - x0) * 2.0).ceil() as usize + 2
        } else {
            10
        })
        .x_label_formatter(&x_fmt)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| err(&e))?;

    for (i, s, pts) in &series {
        let color = if s.dashed {
            BLACK
        } else {
            COLORS[i % COLORS.len()]
        };
        let style = color.stroke_width(2);
        if s.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts.clone(), 10, 6, style))
                .map_err(|e| err(&e))?
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        } else {
            chart
                .draw_series(LineSeries::new(pts.clone(), style))
                .map_err(|e| err(&e))?
                .label(s.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(|e| err(&e))?;
        }
        // interval bars with caps a fiftieth of the x range wide
        let cap = (x1 - x0) / 100.0;
        for (x, lo, hi) in bars(s) {
            let thin = color.stroke_width(1);
            chart
                .draw_series([
                    PathElement::new(vec![(x, lo), (x, hi)], thin),
                    PathElement::new(vec![(x - cap, lo), (x + cap, lo)], thin),
                    PathElement::new(vec![(x - cap, hi), (x + cap, hi)], thin),
                ])
                .map_err(|e| err(&e))?;
        }
    }
    if !series.is_empty() {
        chart
            .configure_series_labels()
            .label_font(("sans-serif", 15))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(c.legend.clone())
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Groups (key, x, y) into series in order of first appearance, points sorted by x.
fn group(items: impl Iterator<Item = (String, f64, f64)>) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for (label, x, y) in items {
        match out.iter_mut().find(|s| s.label == label) {
            Some(s) => s.points.push((x, y)),
            None => out.push(Series {
                label,
                points: vec![(x, y)],
                dashed: false,
                errors: Vec::new(),
            }),
        }
    }
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Legend label of a speed config: what `none` and `none:B` stand for.
fn speed_label(r: &SpeedRow) -> String {
    match (r.policy.as_str(), r.budget) {
        ("none", 0) => "none (full cache)".to_string(),
        ("none", b) => format!("{} (plain llama.cpp, {b} cells)", r.config),
        _ => r.config.clone(),
    }
}

fn short_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string())
}

/// Draws every plot the runs allow into `dir`; returns the files written.
pub fn plot_all(runs: &[ModeRun], dir: &Path) -> Result<Vec<PathBuf>, String> {
    init_fonts()?;
    let mut written = Vec::new();
    let of = |m: Mode| runs.iter().filter(move |r| r.mode == m);

    // Top-1 agreement vs budget (one line per policy, per text when several).
    let agree: Vec<&ModeRun> = of(Mode::Agree).collect();
    if !agree.is_empty() {
        let several = agree.len() > 1;
        let series = group(agree.iter().flat_map(|run| {
            let text = run.text.as_deref().map(short_name).unwrap_or_default();
            let rows = match &run.parsed {
                Parsed::Quality { rows, .. } => rows.as_slice(),
                _ => &[],
            };
            rows.iter().map(move |r| {
                let label = if several {
                    format!("{} ({text})", r.policy)
                } else {
                    r.policy.clone()
                };
                (label, r.budget as f64, r.top1)
            })
        }));
        let path = dir.join("quality_vs_budget.png");
        draw_chart(&Chart {
            path: &path,
            title: "Top-1 agreement with the full cache vs KV budget",
            x_desc: "KV budget (cells)",
            y_desc: "top-1 agreement",
            x_log2: true,
            y_min: None,
            y_max: Some(1.0),
            series,
            legend: SeriesLabelPosition::LowerRight,
        })?;
        written.push(path);
    }

    // Revisited-passage perplexity vs budget, the full-cache reference dashed.
    if let Some(run) = of(Mode::Revisit).next() {
        if let Parsed::Quality { ppl_ref, rows } = &run.parsed {
            let mut series = group(
                rows.iter()
                    .map(|r| (r.policy.clone(), r.budget as f64, r.ppl)),
            );
            let (lo, hi) = rows
                .iter()
                .map(|r| r.budget as f64)
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
                    (a.min(x), b.max(x))
                });
            if ppl_ref.is_finite() && lo.is_finite() {
                let label = format!("full cache ({ppl_ref:.2})");
                series.push(Series::level(label, (lo, hi), *ppl_ref));
            }
            let path = dir.join("revisit_ppl_vs_budget.png");
            draw_chart(&Chart {
                path: &path,
                title: "Perplexity of a revisited passage vs KV budget",
                x_desc: "KV budget (cells)",
                y_desc: "perplexity (lower is better)",
                x_log2: true,
                y_min: None,
                y_max: None,
                series,
                legend: SeriesLabelPosition::UpperRight,
            })?;
            written.push(path);
        }
    }

    // Speed and memory vs context.
    if let Some(run) = of(Mode::Speed).next() {
        if let Parsed::Speed { rows, .. } = &run.parsed {
            let path = dir.join("speed_vs_context.png");
            draw_chart(&Chart {
                path: &path,
                title: "Decode time per token vs context",
                x_desc: "context (tokens)",
                y_desc: "ms / token",
                x_log2: false,
                y_min: Some(0.0),
                y_max: None,
                series: group(
                    rows.iter()
                        .map(|r| (speed_label(r), r.context as f64, r.ms_per_token)),
                ),
                legend: SeriesLabelPosition::UpperLeft,
            })?;
            written.push(path);
            let path = dir.join("kv_bytes_vs_context.png");
            draw_chart(&Chart {
                path: &path,
                title: "KV cache allocated vs context",
                x_desc: "context (tokens)",
                y_desc: "KV cache (MiB)",
                x_log2: false,
                y_min: Some(0.0),
                y_max: None,
                series: group(
                    rows.iter()
                        .map(|r| (speed_label(r), r.context as f64, r.kv_mib())),
                ),
                legend: SeriesLabelPosition::UpperLeft,
            })?;
            written.push(path);
            let archived: Vec<&SpeedRow> = rows
                .iter()
                .filter(|r| r.policy.contains("+archive"))
                .collect();
            if !archived.is_empty() {
                let path = dir.join("archive_bytes_vs_context.png");
                draw_chart(&Chart {
                    path: &path,
                    title: "Archive of evicted cells (host memory) vs context",
                    x_desc: "context (tokens)",
                    y_desc: "archive (MiB)",
                    x_log2: false,
                    y_min: Some(0.0),
                    y_max: None,
                    series: group(
                        archived
                            .iter()
                            .map(|r| (speed_label(r), r.context as f64, r.archive_mib())),
                    ),
                    legend: SeriesLabelPosition::UpperLeft,
                })?;
                written.push(path);
            }
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_in_order_and_sorts_points() {
        let s = group(
            vec![
                ("b".to_string(), 2.0, 1.0),
                ("a".to_string(), 1.0, 2.0),
                ("b".to_string(), 1.0, 3.0),
            ]
            .into_iter(),
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].label, "b");
        assert_eq!(s[0].points, vec![(1.0, 3.0), (2.0, 1.0)]);
        assert_eq!(s[1].points, vec![(1.0, 2.0)]);
    }

    #[test]
    fn padding_handles_flat_and_empty_ranges() {
        assert_eq!(padded(f64::INFINITY, f64::NEG_INFINITY, 0.1), (0.0, 1.0));
        assert_eq!(padded(0.0, 0.0, 0.1), (-1.0, 1.0));
        let (a, b) = padded(10.0, 10.0, 0.1);
        assert!(a < 10.0 && b > 10.0);
        assert_eq!(padded(0.0, 10.0, 0.1), (-1.0, 11.0));
    }

    #[test]
    fn draws_a_png() {
        // No skip: without the font the bench cannot draw its plots, so this fails (CI installs
        // fonts-dejavu-core, see .ci/run).
        if let Err(e) = init_fonts() {
            panic!("{e}");
        }
        let path =
            std::env::temp_dir().join(format!("beaconkv-bench-plot-{}.png", std::process::id()));
        draw_chart(&Chart {
            path: &path,
            title: "test",
            x_desc: "x",
            y_desc: "y",
            x_log2: true,
            y_min: None,
            y_max: None,
            series: vec![
                Series {
                    label: "a".into(),
                    points: vec![(32.0, 1.0), (64.0, f64::NAN), (128.0, 2.0)],
                    dashed: false,
                    errors: Vec::new(),
                },
                Series {
                    label: "ref".into(),
                    points: vec![(32.0, 1.5), (128.0, 1.5)],
                    dashed: true,
                    errors: Vec::new(),
                },
            ],
            legend: SeriesLabelPosition::UpperRight,
        })
        .unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        std::fs::remove_file(&path).unwrap();
    }
}
