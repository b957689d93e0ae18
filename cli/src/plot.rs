//! `--plot`: F1/F0 against history capacity, one line per policy (`kvreuse replay`), and
//! where reuse goes, one stacked bar per fleet shape (`kvreuse fleet`), as SVG.

use std::path::Path;

use anyhow::{Result, anyhow};
use kvreuse::core::fleet::FleetRow;
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

/// `kvreuse fleet --plot`: one horizontal bar per row, stacked from the left: reused, then
/// the losses nearest to reuse first (race, routing, retention, cold), as shares of F0.
pub(crate) fn write_fleet_svg(path: &Path, rows: &[FleetRow]) -> Result<()> {
    const PARTS: [(&str, RGBColor); 5] = [
        ("reused", RGBColor(46, 139, 87)),
        ("race", RGBColor(230, 159, 0)),
        ("routing", RGBColor(213, 94, 0)),
        ("retention", RGBColor(86, 180, 233)),
        ("cold", RGBColor(160, 160, 160)),
    ];
    let labels: Vec<String> = rows
        .iter()
        .map(|r| format!("{} x {} {}", r.workers, r.worker_capacity, r.router.as_str()))
        .collect();
    let n = rows.len().max(1);
    let height = 150 + 30 * n.max(3) as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
    let (upper, legend) = root.split_vertically(height - 36);
    // Segments 0..=n-1 (at least two), the first row at the top.
    let top = n as i32 - 1;
    let mut chart = ChartBuilder::on(&upper)
        .caption("Where reuse goes: shares of prompt tokens (F0)", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(30)
        .y_label_area_size(220)
        .build_cartesian_2d(0.0..1.0, (0..top.max(1)).into_segmented())
        .map_err(|e| anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .x_label_formatter(&|x| format!("{:.0}%", x * 100.0))
        .y_label_formatter(&|y| match y {
            SegmentValue::CenterOf(i) => {
                labels.get((top - *i) as usize).cloned().unwrap_or_default()
            }
            _ => String::new(),
        })
        .y_labels(n)
        .draw()
        .map_err(|e| anyhow!("{e}"))?;
    for (k, (_, color)) in PARTS.iter().enumerate() {
        let bars = rows.iter().enumerate().filter_map(|(i, r)| {
            let f = &r.funnel;
            if f.f0 == 0 {
                return None;
            }
            let parts = [f.f5, f.race + f.retrieval, f.routing, f.retention, f.cold];
            let share = |p: u64| p as f64 / f.f0 as f64;
            let start: f64 = parts[..k].iter().map(|&p| share(p)).sum();
            let end = start + share(parts[k]);
            let at = top - i as i32;
            let mut bar = Rectangle::new(
                [(start, SegmentValue::Exact(at)), (end, SegmentValue::Exact(at + 1))],
                color.filled(),
            );
            bar.set_margin(4, 4, 0, 0);
            Some(bar)
        });
        chart.draw_series(bars).map_err(|e| anyhow!("{e}"))?;
    }
    // The legend, in funnel order, under the chart.
    for (k, (name, color)) in PARTS.iter().enumerate() {
        let x = 236 + 120 * k as i32;
        legend
            .draw(&Rectangle::new([(x, 8), (x + 14, 22)], color.filled()))
            .map_err(|e| anyhow!("{e}"))?;
        legend
            .draw(&Text::new(*name, (x + 20, 8), ("sans-serif", 15)))
            .map_err(|e| anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow!("{e}"))?;
    Ok(())
}
