//! The scaling table as a PNG: simulated time and the lower bound against N (log-log).

use std::path::Path;

use cohort_sim::{Collective, Params};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

use crate::Row;

/// Fonts tried for the labels (Debian/Ubuntu `fonts-dejavu-core`).
const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn load_font() -> Result<(), String> {
    let path = FONTS
        .iter()
        .find(|p| Path::new(p).exists())
        .ok_or("no DejaVuSans.ttf for the plot's labels: install fonts-dejavu-core")?;
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(bytes.into_boxed_slice()),
    )
    .map_err(|_| format!("{path}: not a usable font"))
}

pub fn draw(
    path: &Path,
    rows: &[Row],
    op: Collective,
    bytes: usize,
    p: &Params,
) -> Result<(), String> {
    load_font()?;
    let err = |e: &dyn std::fmt::Display| format!("plot {}: {e}", path.display());
    let root = BitMapBackend::new(path, (1000, 650)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let timed: Vec<(f64, f64)> = rows
        .iter()
        .filter_map(|r| r.time_s.map(|t| (f64::from(r.n), t * 1e6)))
        .collect();
    let bound: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (f64::from(r.n), r.bound_s * 1e6))
        .collect();
    let ymax = timed
        .iter()
        .chain(&bound)
        .map(|&(_, y)| y)
        .fold(1.0, f64::max)
        * 2.0;
    let ymin = bound
        .iter()
        .map(|&(_, y)| y)
        .filter(|&y| y > 0.0)
        .fold(f64::INFINITY, f64::min)
        .min(1.0)
        / 2.0;
    let xmax = rows.iter().map(|r| f64::from(r.n)).fold(2.0, f64::max) * 1.5;
    let title = format!(
        "cohort-sim: group {op}, {bytes} B per server, α={:.2}us, {:.1} GB/s, o={:.2}us",
        p.alpha_s * 1e6,
        1.0 / p.beta_s_per_byte / 1e9,
        p.overhead_s * 1e6
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((1.5f64..xmax).log_scale(), (ymin..ymax).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("node servers N")
        .y_desc("completion time (us)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new(timed.clone(), RED.stroke_width(2)))
        .map_err(|e| err(&e))?
        .label("simulated (engines / schedule model)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
    chart
        .draw_series(
            timed
                .iter()
                .map(|&(x, y)| Circle::new((x, y), 4, RED.filled())),
        )
        .map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new(bound, BLUE.stroke_width(2)))
        .map_err(|e| err(&e))?
        .label("lower bound ⌈log2 N⌉α + (N−1)/N·N·D·β")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
