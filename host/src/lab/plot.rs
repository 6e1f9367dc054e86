//! A scenario as a picture (SVG, drawn with `plotters`): each stream's throughput over
//! time, with the scenario's moments marked — the etcd pause, the agent's restart, the
//! barriers' release, the endpoint's switch.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

/// One stream: its name and when data arrived, in seconds from the plot's start.
pub struct Series {
    /// The stream's name, in the legend.
    pub name: String,
    /// Arrival times, seconds.
    pub arrivals: Vec<f64>,
}

/// A marked moment: seconds from the plot's start, and what happened.
pub type Event = (f64, String);

/// The width of a throughput bucket, seconds.
const BUCKET: f64 = 0.25;

/// Arrivals per second in buckets of [`BUCKET`], from 0 to `end`.
fn throughput(arrivals: &[f64], end: f64) -> Vec<(f64, f64)> {
    let buckets = (end / BUCKET).ceil().max(1.0) as usize;
    let mut counts = vec![0u32; buckets];
    for a in arrivals.iter().filter(|a| **a >= 0.0 && **a < end) {
        counts[((a / BUCKET) as usize).min(buckets - 1)] += 1;
    }
    counts
        .iter()
        .enumerate()
        .map(|(i, c)| (i as f64 * BUCKET, f64::from(*c) / BUCKET))
        .collect()
}

/// Draws `series` and `events` from 0 to `end` seconds into the SVG file `path`.
///
/// # Errors
/// What the drawing backend says, as text.
pub fn draw(
    path: &Path,
    title: &str,
    series: &[Series],
    events: &[Event],
    end: f64,
) -> Result<(), String> {
    let curves: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .map(|s| (s.name.clone(), throughput(&s.arrivals, end)))
        .collect();
    let top = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|(_, y)| *y))
        .fold(1.0, f64::max)
        * 1.25;
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| e.to_string();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..end, 0.0..top)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("messages / s")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, curve)) in curves.into_iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(curve, color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    for (i, (at, what)) in events.iter().enumerate() {
        let color = RGBColor(90, 90, 90);
        chart
            .draw_series(LineSeries::new(
                vec![(*at, 0.0), (*at, top)],
                color.stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
        // Staggered, so that close moments stay readable; left of the line near the
        // right edge.
        let y = top * (0.95 - 0.07 * (i % 6) as f64);
        let (x, h) = if *at > end * 0.7 {
            (*at - end * 0.005, HPos::Right)
        } else {
            (*at + end * 0.005, HPos::Left)
        };
        let font = ("sans-serif", 13)
            .into_font()
            .color(&color)
            .pos(Pos::new(h, VPos::Top));
        chart
            .draw_series(std::iter::once(Text::new(what.clone(), (x, y), font)))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_counts_arrivals_per_bucket_as_a_rate() {
        let t = throughput(&[0.1, 0.2, 0.3, 1.1], 1.5);
        assert_eq!(t.len(), 6);
        assert_eq!(t[0], (0.0, 8.0), "two arrivals in the first quarter second");
        assert_eq!(t[1].1, 4.0);
        assert_eq!(t[2].1, 0.0, "a gap is a zero");
        assert_eq!(t[4].1, 4.0);
    }

    #[test]
    fn a_plot_is_an_svg_with_its_streams_and_moments() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.svg");
        let series = [Series {
            name: "c1n1p2 → c2n1p1".into(),
            arrivals: (0..100).map(|i| f64::from(i) * 0.02).collect(),
        }];
        draw(
            &path,
            "restart",
            &series,
            &[(1.0, "agent restarted".into())],
            2.0,
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        assert!(svg.contains("agent restarted"));
        assert!(svg.contains("c1n1p2 → c2n1p1"));
    }
}
