//! The two exposition formats a scraper may ask for, chosen from its `Accept` header:
//! OpenMetrics when it asks for it (Prometheus does, first), the text format 0.0.4
//! otherwise (what `curl`, older scrapers and `promtool check metrics` read).

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
    /// `text/plain; version=0.0.4`.
    Text,
}

impl Format {
    /// The format an `Accept` header asks for: the media range with the highest `q`
    /// that weft serves (the first of equals), the text format when none is given
    /// or none matches, as Prometheus' own client libraries decide.
    ///
    /// # Example
    /// ```
    /// use weft::metrics::Format;
    /// assert_eq!(Format::negotiate(None), Format::Text);
    /// assert_eq!(
    ///     Format::negotiate(Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")),
    ///     Format::OpenMetrics
    /// );
    /// assert_eq!(Format::negotiate(Some("text/plain; version=0.0.4")), Format::Text);
    /// ```
    pub fn negotiate(accept: Option<&str>) -> Format {
        let mut best: Option<(f32, Format)> = None;
        for range in accept.unwrap_or_default().split(',') {
            let Ok(mime) = range.trim().parse::<mime::Mime>() else {
                continue;
            };
            let q = mime
                .get_param("q")
                .and_then(|q| q.as_str().parse::<f32>().ok())
                .unwrap_or(1.0);
            let format = match (mime.type_().as_str(), mime.subtype().as_str()) {
                ("application", "openmetrics-text") => Format::OpenMetrics,
                ("text", "plain") => match mime.get_param("version").map(|v| v.as_str()) {
                    None | Some("0.0.4") => Format::Text,
                    Some(_) => continue,
                },
                ("text", "*") | ("*", "*") => Format::Text,
                _ => continue,
            };
            if q > 0.0 && best.is_none_or(|(b, _)| q > b) {
                best = Some((q, format));
            }
        }
        best.map_or(Format::Text, |(_, f)| f)
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The text format 0.0.4 of an OpenMetrics exposition written by `prometheus-client`
/// (which writes OpenMetrics only). For the types weft exports (counter, gauge,
/// histogram; no exemplars, no `_created`) the two differ in three things, all in
/// the lines `prometheus-client` writes per family (`# HELP`, `# TYPE`, then
/// `# UNIT` when there is a unit): a counter's family is named with its `_total`
/// samples' name, there are no `# UNIT` lines, and no `# EOF`. Samples are the same.
pub fn text_004(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            // Written once its family's type is known.
            help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.rsplit_once(' ').unwrap_or((rest, "untyped"));
            let family = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_owned()
            };
            if let Some(h) = help.take() {
                let text = h.split_once(' ').map_or("", |(_, text)| text);
                out.push_str(&format!("# HELP {family} {text}\n"));
            }
            out.push_str(&format!("# TYPE {family} {kind}\n"));
            continue;
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_q_wins_and_unknown_or_refused_ranges_count_for_nothing() {
        let cases = [
            // Prometheus 2.x's own header: OpenMetrics first.
            ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1", Format::OpenMetrics),
            ("text/plain;version=0.0.4;q=0.9, application/openmetrics-text;q=0.5", Format::Text),
            ("application/openmetrics-text;q=0", Format::Text),
            ("application/json", Format::Text),
            ("*/*", Format::Text),
            ("text/plain;version=9.9.9, application/openmetrics-text;q=0.1", Format::OpenMetrics),
            ("garbage;;;, application/openmetrics-text", Format::OpenMetrics),
            ("", Format::Text),
        ];
        for (accept, want) in cases {
            assert_eq!(Format::negotiate(Some(accept)), want, "{accept}");
        }
    }

    #[test]
    fn counters_are_named_by_their_samples_and_openmetrics_only_lines_go() {
        let om = "# HELP weft_x Things done.\n# TYPE weft_x counter\nweft_x_total{a=\"b\"} 3\n\
                  # HELP weft_t_seconds Took.\n# TYPE weft_t_seconds histogram\n# UNIT weft_t_seconds seconds\n\
                  weft_t_seconds_bucket{le=\"+Inf\"} 0\nweft_t_seconds_sum 0.0\nweft_t_seconds_count 0\n\
                  # HELP weft_g Now.\n# TYPE weft_g gauge\nweft_g 1.0\n# EOF\n";
        assert_eq!(
            text_004(om),
            "# HELP weft_x_total Things done.\n# TYPE weft_x_total counter\nweft_x_total{a=\"b\"} 3\n\
             # HELP weft_t_seconds Took.\n# TYPE weft_t_seconds histogram\n\
             weft_t_seconds_bucket{le=\"+Inf\"} 0\nweft_t_seconds_sum 0.0\nweft_t_seconds_count 0\n\
             # HELP weft_g Now.\n# TYPE weft_g gauge\nweft_g 1.0\n"
        );
    }
}
