//! The soak as a picture (SVG, drawn with `plotters`): each agent's resident memory,
//! open files and runtime tasks over the run, one panel each.

use super::sample::Sample;
use crate::lab::spec::Spec;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// One panel: its axis name and the value it shows.
type Panel = (&'static str, fn(&Sample) -> Option<f64>);

const PANELS: [Panel; 3] = [
    ("resident memory (MiB)", |s| Some(s.rss_kib as f64 / 1024.0)),
    ("open file descriptors", |s| Some(s.fds as f64)),
    ("runtime tasks alive", |s| s.tasks.map(|t| t as f64)),
];

/// Draws `samples` (seconds from 0 to `end`) into the SVG file `path`.
///
/// # Errors
/// What the drawing backend says, as text.
pub fn draw(path: &Path, title: &str, samples: &[Sample], end: f64) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::new(path, (960, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(title, ("sans-serif", 18))
        .map_err(|e| err(&e))?;
    let mut by_node: BTreeMap<String, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_node.entry(Spec::node_name(s.node)).or_default().push(s);
    }
    let minutes = end / 60.0;
    for ((axis, value), area) in PANELS.iter().zip(root.split_evenly((3, 1))) {
        let top = samples.iter().filter_map(value).fold(1.0, f64::max) * 1.2;
        let mut chart = ChartBuilder::on(&area)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..minutes.max(0.1), 0.0..top)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("minutes")
            .y_desc(*axis)
            .draw()
            .map_err(|e| err(&e))?;
        for (i, (node, points)) in by_node.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            // A restarted agent is a new process: its line starts again.
            let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
            let mut pid = None;
            for s in points {
                if pid != Some(s.pid) {
                    runs.push(Vec::new());
                    pid = Some(s.pid);
                }
                if let Some(v) = value(s) {
                    runs.last_mut().expect("a run").push((s.at / 60.0, v));
                }
            }
            for (j, run) in runs.into_iter().enumerate() {
                let series = chart
                    .draw_series(LineSeries::new(run, color.stroke_width(2)))
                    .map_err(|e| err(&e))?;
                if j == 0 {
                    series
                        .label(node.clone())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
                }
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}
