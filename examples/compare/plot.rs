//! The SVG plots under `docs/`, drawn from a [`SizeReport`] with plotters.

use std::error::Error;

use plotters::prelude::*;

use crate::measure::{LoadPoint, Rates, SizeReport};

const ONE_THREAD: RGBColor = RGBColor(0x1c, 0x7e, 0xd6);
const TWO_THREADS: RGBColor = RGBColor(0xf0, 0x8c, 0x00);
const GREY: RGBColor = RGBColor(0x86, 0x8e, 0x96);
const OURS: RGBColor = RGBColor(0xd9, 0x48, 0x0f);

/// The file name under `docs/` of the lookup plot at `size`.
pub(crate) fn lookups_file(size: &str) -> String {
    format!("lookups_{size}.svg")
}

/// The file name under `docs/` of the insert-against-load plot at `size`.
pub(crate) fn insert_curve_file(size: &str) -> String {
    format!("insert_vs_load_{size}.svg")
}

/// Every plot of `r`: (file name under `docs/`, SVG).
pub(crate) fn plots(r: &SizeReport) -> Result<Vec<(String, String)>, Box<dyn Error>> {
    Ok(vec![
        (lookups_file(r.size), lookups(r)?),
        (insert_curve_file(r.size), insert_curve(r)?),
    ])
}

/// Horizontal grouped bars: each contender's absent-key lookup rate at 1 and 2 threads.
pub(crate) fn lookups(r: &SizeReport) -> Result<String, Box<dyn Error>> {
    let rows = &r.misses;
    let max = rows
        .iter()
        .flat_map(|row| row.threads.iter().flatten())
        .fold(0.0, |a: f64, &b| a.max(b / 1e6));
    let height = 130 + 40 * rows.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, height)).into_drawing_area();
        root.fill(&WHITE)?;
        // Contender `i` (from the top) has the band from y = 10 (rows - i - 1) to 10 (rows - i):
        // its 1-thread bar in the upper half, its 2-thread bar in the lower.
        let top = 10 * rows.len() as i32;
        let centre = |i: usize| top - 10 * i as i32 - 5;
        let centres: Vec<i32> = (0..rows.len()).map(centre).collect();
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("Lookups of absent keys, {} keys, by thread count", r.size),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(230)
            .build_cartesian_2d(0.0..max * 1.12, (0..top).with_key_points(centres))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .max_light_lines(4)
            .y_label_formatter(&|y| label_at(rows, top, *y))
            .x_desc("lookups per second, millions (M/s)")
            .y_desc("contender")
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .draw()?;
        for (t, colour, label) in [(0, ONE_THREAD, "1 thread"), (1, TWO_THREADS, "2 threads")] {
            // The half of the band this thread count's bar takes, and its middle.
            let half = |i: usize| {
                if t == 0 {
                    (centre(i), centre(i) + 4)
                } else {
                    (centre(i) - 4, centre(i))
                }
            };
            let bars = rows.iter().enumerate().filter_map(|(i, row)| {
                let (low, high) = half(i);
                let v = row.threads[t]? / 1e6;
                Some(Rectangle::new([(0.0, low), (v, high)], colour.filled()))
            });
            chart.draw_series(bars)?.label(label).legend(move |(x, y)| {
                Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled())
            });
            let values = rows.iter().enumerate().map(|(i, row)| {
                let (low, high) = half(i);
                let (x, text) = match row.threads[t] {
                    Some(v) => (v / 1e6, format!(" {:.1}", v / 1e6)),
                    None => (0.0, " not run at this thread count".to_string()),
                };
                let style = ("sans-serif", 12)
                    .into_font()
                    .color(&BLACK)
                    .pos(text_anchor());
                Text::new(text, (x, (low + high) / 2), style)
            });
            chart.draw_series(values)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(GREY)
            .label_font(("sans-serif", 14))
            .draw()?;
        root.present()?;
    }
    Ok(svg)
}

/// Text placed to the right of its point, vertically centred.
fn text_anchor() -> plotters::style::text_anchor::Pos {
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    Pos::new(HPos::Left, VPos::Center)
}

/// The name of the contender whose band holds `y`.
fn label_at(rows: &[Rates], top: i32, y: i32) -> String {
    let i = usize::try_from((top - y) / 10).unwrap_or(usize::MAX);
    rows.get(i)
        .map_or(String::new(), |row| row.name.to_string())
}

/// A line chart: this crate's filter's insert rate within each 5% step of load.
pub(crate) fn insert_curve(r: &SizeReport) -> Result<String, Box<dyn Error>> {
    let points: Vec<(f64, f64)> = r
        .insert_curve
        .iter()
        .map(
            |&LoadPoint {
                 load,
                 inserts_per_second,
             }| (load * 100.0, inserts_per_second / 1e6),
        )
        .collect();
    let max = points.iter().fold(0.0, |a: f64, p| a.max(p.1));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "cuckoo-guard inserts against load, {} keys, 1 thread",
                    r.size
                ),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..100.0, 0.0..max * 1.1)?;
        chart
            .configure_mesh()
            .x_labels(11)
            .max_light_lines(4)
            .x_label_formatter(&|x| format!("{x:.0}%"))
            .x_desc("load after the step (share of slots filled)")
            .y_desc("inserts per second within the step, millions (M/s)")
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .draw()?;
        chart.draw_series(LineSeries::new(
            points.iter().copied(),
            OURS.stroke_width(2),
        ))?;
        chart.draw_series(PointSeries::of_element(
            points.iter().copied(),
            4,
            OURS.filled(),
            &|c, s, st| Circle::new(c, s, st),
        ))?;
        root.present()?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use crate::measure::sample_report;

    #[test]
    fn plots_have_axes_legends_and_every_contender() {
        let report = sample_report();
        let plots = super::plots(&report.sizes[0]).unwrap();
        let names: Vec<&str> = plots.iter().map(|(file, _)| file.as_str()).collect();
        assert_eq!(names, ["lookups_1M.svg", "insert_vs_load_1M.svg"]);
        let lookups = &plots[0].1;
        for text in [
            "cuckoo-guard",
            "cuckoofilter default",
            "1 thread",
            "2 threads",
            "(M/s)",
        ] {
            assert!(lookups.contains(text), "lookups plot lacks {text:?}");
        }
        assert!(lookups.contains("not run at this thread count"));
        let curve = &plots[1].1;
        for text in ["load after the step", "(M/s)", "100%"] {
            assert!(curve.contains(text), "insert plot lacks {text:?}");
        }
    }
}
