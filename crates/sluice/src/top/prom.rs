//! The Prometheus text exposition, read back: the series `sluice top` needs from a gateway's
//! `/metrics` and an agent's, by name, summed per tenant. Pure.

use std::collections::BTreeMap;

/// One sample: its name, labels and value.
type Sample = (String, Vec<(String, String)>, f64);

/// Every sample of one exposition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    samples: Vec<Sample>,
}

impl Exposition {
    /// Parses `text`; comment lines and lines that do not parse are skipped.
    pub fn parse(text: &str) -> Self {
        let samples = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(sample)
            .collect();
        Self { samples }
    }

    /// The series `name` per `tenant` label, summed over its other labels.
    pub fn per_tenant(&self, name: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (n, labels, v) in &self.samples {
            if n != name {
                continue;
            }
            if let Some((_, t)) = labels.iter().find(|(k, _)| k == "tenant") {
                *out.entry(t.clone()).or_default() += v;
            }
        }
        out
    }

    /// One tenant's value of `name`, summed over its other labels.
    pub fn tenant(&self, name: &str, tenant: &str) -> Option<f64> {
        self.per_tenant(name).get(tenant).copied()
    }

    /// The unlabelled series `name`.
    pub fn scalar(&self, name: &str) -> Option<f64> {
        self.samples
            .iter()
            .find(|(n, labels, _)| n == name && labels.is_empty())
            .map(|(_, _, v)| *v)
    }
}

/// `name{k="v",...} value` or `name value`.
fn sample(line: &str) -> Option<Sample> {
    let (name, labels, value) = if let Some(open) = line.find('{') {
        let close = line.rfind('}')?;
        let labels = labels(&line[open + 1..close])?;
        (line[..open].to_owned(), labels, &line[close + 1..])
    } else {
        let (name, rest) = line.split_once(char::is_whitespace)?;
        (name.to_owned(), Vec::new(), rest)
    };
    let value = value.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((name, labels, value))
}

/// `k="v",k2="v2"`, with `\\`, `\"` and `\n` escapes in values.
fn labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(out);
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if chars.next() != Some('"') {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                c => value.push(c),
            }
        }
        out.push((key.trim().to_owned(), value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_a_series_per_tenant_over_its_other_labels() {
        let e = Exposition::parse(
            "# HELP sluice_requests_total S3 operations.\n\
             sluice_requests_total{tenant=\"alice\",op=\"GetObject\",outcome=\"ok\"} 7\n\
             sluice_requests_total{tenant=\"alice\",op=\"PutObject\",outcome=\"error\"} 2\n\
             sluice_requests_total{tenant=\"b\\\"ob\",op=\"GetObject\",outcome=\"ok\"} 1\n\
             sluice_qos_limit_bytes_per_second{tenant=\"alice\"} +Inf\n\
             sluice_qos_cluster_fallback 1\n\
             garbage line\n",
        );
        assert_eq!(e.tenant("sluice_requests_total", "alice"), Some(9.0));
        assert_eq!(e.tenant("sluice_requests_total", "b\"ob"), Some(1.0));
        assert_eq!(
            e.tenant("sluice_qos_limit_bytes_per_second", "alice"),
            Some(f64::INFINITY)
        );
        assert_eq!(e.scalar("sluice_qos_cluster_fallback"), Some(1.0));
        assert_eq!(e.scalar("sluice_requests_total"), None);
        assert_eq!(e.tenant("sluice_requests_total", "carol"), None);
    }
}
