//! The load's report as one self-contained HTML file for people: the summary and the
//! thresholds as tables, then plots drawn with `plotters` as inline SVG (the browser draws
//! their text; nothing is fetched): throughput per tool over time, p50/p95/p99 over time per
//! tool, errors over time, and each tool's latency distribution.

use std::fmt::Write as _;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::recorder::Recorder;
use super::report::LoadReport;

const WIDTH: u32 = 960;
const HEIGHT: u32 = 320;

/// The report page.
pub fn render(report: &LoadReport, recorder: &Recorder) -> String {
    let mut page = String::new();
    let _ = write!(
        page,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>butler-memory load: {name}</title>\
         <style>body{{font-family:sans-serif;margin:2em;max-width:1000px}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}\
         th:first-child,td:first-child{{text-align:left}}.fail{{color:#b00;font-weight:bold}}.pass{{color:#070}}</style>\
         </head><body>\n<h1>{name}</h1>\n<p>Against {target}: {secs:.0} s counted, {scheduled} calls scheduled, \
         {answered} answered, {failed} failed. Latency counts from each call's due time.</p>\n",
        name = escape(&report.scenario),
        target = escape(&report.target),
        secs = report.counted_secs,
        scheduled = report.scheduled,
        answered = report.answered,
        failed = report.failed,
    );
    page.push_str(&summary(report));
    for (title, svg) in plots(report, recorder) {
        let _ = write!(page, "<h2>{}</h2>\n{svg}\n", escape(&title));
    }
    page.push_str("</body></html>\n");
    page
}

fn summary(report: &LoadReport) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
    let mut out = String::from(
        "<table><tr><th>tool</th><th>calls</th><th>rate/s</th><th>p50 ms</th><th>p95 ms</th>\
         <th>p99 ms</th><th>max ms</th><th>episodes</th><th>errors</th></tr>\n",
    );
    for t in &report.tools {
        let errors: Vec<String> = t.errors.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&t.tool),
            t.calls,
            t.rate,
            ms(t.p50_ms),
            ms(t.p95_ms),
            ms(t.p99_ms),
            ms(t.max_ms),
            t.episodes,
            escape(&errors.join(", "))
        );
    }
    out.push_str("</table>\n<table><tr><th>threshold</th><th>measured</th><th>result</th></tr>\n");
    for t in &report.thresholds {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
            escape(&t.threshold),
            t.value.map_or("nothing".to_owned(), |v| v.to_string()),
            if t.ok { "pass" } else { "fail" },
            if t.ok { "PASS" } else { "FAIL" }
        );
    }
    let _ = writeln!(
        out,
        "</table>\n<p>Read back {} episodes: {} lost, {} unverified; {} duplicated ids. \
         Client: {} waits for a free slot, sent at most {:.1} ms late{}. \
         Machine CPU {:.3} CPU-s per 1,000 calls, steal {:.1}%.</p>",
        report.read_back.checked,
        report.read_back.lost,
        report.read_back.unverified,
        report.duplicated,
        report.client.waits,
        report.client.worst_send_lag_ms,
        if report.client.saturated {
            " (saturated)"
        } else {
            ""
        },
        report.cpu_seconds_per_1000_calls,
        report.cpu["steal"].as_f64().unwrap_or(0.0) * 100.0
    );
    out
}

/// Every plot, titled.
fn plots(report: &LoadReport, recorder: &Recorder) -> Vec<(String, String)> {
    let tools: Vec<&str> = report.tools.iter().map(|t| t.tool.as_str()).collect();
    let series = |value: &dyn Fn(&super::report::ToolReport) -> Option<f64>, tool: &str| {
        report
            .timeline
            .iter()
            .filter_map(|m| {
                let t = m.tools.iter().find(|t| t.tool == tool)?;
                Some((m.at, value(t)?))
            })
            .collect::<Vec<(f64, f64)>>()
    };
    let mut out = Vec::new();
    let throughput: Vec<(String, Vec<(f64, f64)>)> = tools
        .iter()
        .map(|tool| (tool.to_string(), series(&|t| Some(t.rate), tool)))
        .collect();
    out.push((
        "Throughput (answered calls per second)".to_owned(),
        lines(&throughput, "seconds", "calls/s", false),
    ));
    for tool in &tools {
        type Pick = fn(&super::report::ToolReport) -> Option<f64>;
        let picks: [(&str, Pick); 3] = [
            ("p50", |t| t.p50_ms),
            ("p95", |t| t.p95_ms),
            ("p99", |t| t.p99_ms),
        ];
        let percentiles: Vec<(String, Vec<(f64, f64)>)> = picks
            .iter()
            .map(|(name, pick)| ((*name).to_owned(), series(pick, tool)))
            .collect();
        out.push((
            format!("{tool}: latency over time"),
            lines(&percentiles, "seconds", "ms", false),
        ));
    }
    let errors: Vec<(String, Vec<(f64, f64)>)> = tools
        .iter()
        .map(|tool| {
            (
                tool.to_string(),
                series(&|t| Some(t.errors.values().sum::<u64>() as f64), tool),
            )
        })
        .collect();
    out.push((
        "Errors per time bucket".to_owned(),
        lines(&errors, "seconds", "errors", false),
    ));
    let distributions: Vec<(String, Vec<(f64, f64)>)> = recorder
        .tools
        .iter()
        .map(|(tool, stats)| {
            let points = stats
                .latency
                .iter_log(100, 1.25)
                .filter(|v| v.count_since_last_iteration() > 0)
                .map(|v| {
                    (
                        v.value_iterated_to() as f64 / 1000.0,
                        v.count_since_last_iteration() as f64,
                    )
                })
                .collect();
            (tool.to_string(), points)
        })
        .collect();
    out.push((
        "Latency distribution (calls per latency bucket)".to_owned(),
        lines(&distributions, "ms (log scale)", "calls", true),
    ));
    out
}

/// A line chart of `series` as SVG; `log_x` for a logarithmic x axis.
fn lines(
    series: &[(String, Vec<(f64, f64)>)],
    x_label: &str,
    y_label: &str,
    log_x: bool,
) -> String {
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x_min, mut x_max, mut y_max) = (f64::INFINITY, 0f64, 0f64);
    for (x, y) in points {
        x_min = x_min.min(*x);
        x_max = x_max.max(*x);
        y_max = y_max.max(*y);
    }
    if !x_min.is_finite() {
        return "<p>Nothing was measured.</p>".to_owned();
    }
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        let drawn = if log_x {
            let x = (x_min.max(0.001) * 0.8)..(x_max.max(0.01) * 1.25);
            draw(&root, series, x.log_scale(), y_max, x_label, y_label)
        } else {
            draw(&root, series, 0f64..x_max.max(1.0), y_max, x_label, y_label)
        };
        if let Err(e) = drawn {
            return format!("<p>The plot could not be drawn: {}</p>", escape(&e));
        }
    }
    svg
}

fn draw<X>(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    series: &[(String, Vec<(f64, f64)>)],
    x: X,
    y_max: f64,
    x_label: &str,
    y_label: &str,
) -> Result<(), String>
where
    X: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    X::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(root)
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(x, 0f64..(y_max * 1.1).max(1.0))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .axis_desc_style(("sans-serif", 14))
        .label_style(("sans-serif", 12))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, points)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

/// `text` safe inside HTML.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
