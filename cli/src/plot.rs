//! `--plot`: F1/F0 against history capacity, one line per policy, as SVG.

use std::path::Path;

use anyhow::{Result, anyhow};
use kvreuse::core::replay::{Policy, Row};
use plotters::prelude::*;

pub(crate) fn write_svg(path: &Path, rows: &[Row]) -> Result<()> {
    let ratio =
        |r: &Row| if r.f0_tokens == 0 { 0.0 } else { r.f1_tokens as f64 / r.f0_tokens as f64 };
    let finite: Vec<&Row> = rows.iter().filter(|r| r.capacity.is_some()).collect();
    let (lo, hi) = finite
        .iter()
        .filter_map(|r| r.capacity)
        .fold((usize::MAX, 0), |(lo, hi), c| (lo.min(c), hi.max(c)));
    let (lo, hi) = if finite.is_empty() {
        (1.0, 10.0)
    } else {
        (lo as f64, (hi as f64).max(lo as f64 * 10.0))
    };

    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Prefix reuse (F1/F0) against history capacity", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(60)
        .build_cartesian_2d((lo * 0.8..hi * 1.25).log_scale(), 0.0..1.0)
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc("capacity (blocks)")
        .y_desc("F1 / F0")
        .y_label_formatter(&|y| format!("{:.0}%", y * 100.0))
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (policy, color) in [(Policy::Fifo, &BLUE), (Policy::Lru, &RED)] {
        let mut points: Vec<(f64, f64)> = finite
            .iter()
            .filter(|r| r.policy == policy)
            .map(|r| (r.capacity.unwrap_or(1) as f64, ratio(r)))
            .collect();
        if points.is_empty() {
            continue;
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(|e| anyhow!("{e}"))?
            .label(policy.name())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.into_iter().map(|p| Circle::new(p, 4, color.filled())))
            .map_err(|e| anyhow!("{e}"))?;
    }
    if let Some(inf) = rows.iter().find(|r| r.capacity.is_none()) {
        let y = ratio(inf);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(lo * 0.8, y), (hi * 1.25, y)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(|e| anyhow!("{e}"))?
            .label("inf")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
