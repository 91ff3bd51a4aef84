//! Captured stacks as a pprof profile (Google's profile.proto, gzipped),
//! for continuous profilers that scrape it (`topdown serve --capture`,
//! /debug/pprof/topdown): sample type `calls/count`, one sample per
//! distinct stack and process, leaf first (the traced function, then the
//! kernel frames, then the user frames), labelled `function`, `reason`,
//! `comm` and `pid`.

#[rustfmt::skip]
mod profile;

use std::collections::HashMap;
use std::io::Write;

use prost::Message;

use crate::report::{Process, Stack};

/// One distinct stack of one process in a window, and how many calls
/// were captured with it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) function: String,
    pub(crate) reason: String,
    pub(crate) stack: Stack,
    pub(crate) process: Process,
}

/// The strings, functions and locations of a profile, each stored once.
#[derive(Default)]
struct Tables {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    functions: Vec<profile::Function>,
    function_ids: HashMap<String, u64>,
    locations: Vec<profile::Location>,
    location_ids: HashMap<String, u64>,
}

impl Tables {
    fn new() -> Self {
        let mut t = Tables::default();
        // The string table starts with "" by the format's rule.
        t.string("");
        t
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), id);
        id
    }

    /// A frame as topdown prints it (`name+0x1f`, or with a debug vmlinux
    /// `name+0x1f (file:line)`): one location per distinct frame, one
    /// function per name.
    fn location(&mut self, frame: &str) -> u64 {
        if let Some(&id) = self.location_ids.get(frame) {
            return id;
        }
        let name = function_name(frame);
        let function_id = match self.function_ids.get(name) {
            Some(&id) => id,
            None => {
                let id = self.functions.len() as u64 + 1;
                let n = self.string(name);
                self.functions.push(profile::Function {
                    id,
                    name: n,
                    system_name: n,
                    ..Default::default()
                });
                self.function_ids.insert(name.to_string(), id);
                id
            }
        };
        let id = self.locations.len() as u64 + 1;
        self.locations.push(profile::Location {
            id,
            line: vec![profile::Line {
                function_id,
                ..Default::default()
            }],
            ..Default::default()
        });
        self.location_ids.insert(frame.to_string(), id);
        id
    }
}

/// The function's name in a frame: what comes before `+0x...` or a space.
fn function_name(frame: &str) -> &str {
    let end = frame.find(['+', ' ']).unwrap_or(frame.len());
    match &frame[..end] {
        "" => frame,
        name => name,
    }
}

/// The string ids of the labels' keys.
struct LabelKeys {
    function: i64,
    reason: i64,
    comm: i64,
    pid: i64,
}

/// The profile of `samples` captured over `duration_ns` from `start_ns`
/// (Unix time), encoded and gzipped. Samples are sorted, so one set of
/// stacks always gives the same bytes.
pub(crate) fn encode(samples: &HashMap<Key, u64>, start_ns: i64, duration_ns: i64) -> Vec<u8> {
    let mut t = Tables::new();
    let calls = t.string("calls");
    let count = t.string("count");
    let keys = LabelKeys {
        function: t.string("function"),
        reason: t.string("reason"),
        comm: t.string("comm"),
        pid: t.string("pid"),
    };
    let out = in_order(samples)
        .into_iter()
        .map(|(k, &n)| sample(&mut t, &keys, k, n))
        .collect();
    let kind = profile::ValueType {
        r#type: calls,
        unit: count,
    };
    let p = profile::Profile {
        sample_type: vec![kind],
        sample: out,
        location: t.locations,
        function: t.functions,
        string_table: t.strings,
        time_nanos: start_ns,
        duration_nanos: duration_ns,
        period_type: Some(kind),
        period: 1,
        ..Default::default()
    };
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    gz.write_all(&p.encode_to_vec()).expect("writes to memory");
    gz.finish().expect("writes to memory")
}

/// The samples in one fixed order: by function, reason, stack, process.
fn in_order(samples: &HashMap<Key, u64>) -> Vec<(&Key, &u64)> {
    let mut sorted: Vec<(&Key, &u64)> = samples.iter().collect();
    sorted.sort_by(|a, b| {
        (
            &a.0.function,
            &a.0.reason,
            &a.0.stack.kernel,
            &a.0.stack.user,
        )
            .cmp(&(
                &b.0.function,
                &b.0.reason,
                &b.0.stack.kernel,
                &b.0.stack.user,
            ))
            .then(a.0.process.pid.cmp(&b.0.process.pid))
            .then(a.0.process.comm.cmp(&b.0.process.comm))
    });
    sorted
}

/// One stack's sample, leaf first: the traced function, the kernel frames,
/// then the user frames; `n` calls, labelled.
fn sample(t: &mut Tables, keys: &LabelKeys, k: &Key, n: u64) -> profile::Sample {
    let frames = std::iter::once(k.function.as_str())
        .chain(k.stack.kernel.iter().map(String::as_str))
        .chain(k.stack.user.iter().map(String::as_str));
    let location_id = frames.map(|f| t.location(f)).collect();
    let label = vec![
        profile::Label {
            key: keys.function,
            str: t.string(&k.function),
            ..Default::default()
        },
        profile::Label {
            key: keys.reason,
            str: t.string(&k.reason),
            ..Default::default()
        },
        profile::Label {
            key: keys.comm,
            str: t.string(&k.process.comm),
            ..Default::default()
        },
        profile::Label {
            key: keys.pid,
            num: i64::from(k.process.pid),
            ..Default::default()
        },
    ];
    profile::Sample {
        location_id,
        value: vec![n.min(i64::MAX as u64) as i64],
        label,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn key(reason: &str, kernel: &[&str], user: &[&str], pid: u32) -> Key {
        Key {
            function: "deferred_split_folio".into(),
            reason: reason.into(),
            stack: Stack {
                kernel: kernel.iter().map(|s| s.to_string()).collect(),
                user: user.iter().map(|s| s.to_string()).collect(),
            },
            process: Process {
                comm: "thp".into(),
                pid,
            },
        }
    }

    fn decode(gz: &[u8]) -> profile::Profile {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut raw)
            .unwrap();
        profile::Profile::decode(raw.as_slice()).unwrap()
    }

    #[test]
    fn one_sample_per_stack_and_process_leaf_first_with_labels() {
        let mut s = HashMap::new();
        s.insert(
            key(
                "ZAP",
                &["zap_pmd_range+0x1f", "unmap_page_range+0x20"],
                &[],
                7,
            ),
            3,
        );
        s.insert(key("ZAP", &["zap_pmd_range+0x1f"], &["main+0x5"], 7), 2);
        s.insert(key("FAULT_ALLOC", &["do_anon+0x10"], &[], 8), 5);
        let p = decode(&encode(&s, 1_000, 5_000_000_000));
        let str_of = |i: i64| p.string_table[i as usize].as_str();
        assert_eq!(p.string_table[0], "");
        assert_eq!(p.sample_type.len(), 1);
        assert_eq!(
            (
                str_of(p.sample_type[0].r#type),
                str_of(p.sample_type[0].unit)
            ),
            ("calls", "count")
        );
        assert_eq!((p.time_nanos, p.duration_nanos), (1_000, 5_000_000_000));
        assert_eq!(p.sample.len(), 3);
        let frames = |smp: &profile::Sample| -> Vec<String> {
            smp.location_id
                .iter()
                .map(|&id| {
                    let loc = &p.location[id as usize - 1];
                    assert_eq!(loc.id, id);
                    let f = &p.function[loc.line[0].function_id as usize - 1];
                    str_of(f.name).to_string()
                })
                .collect()
        };
        let labels = |smp: &profile::Sample| -> Vec<(String, String)> {
            smp.label
                .iter()
                .map(|l| {
                    let v = if l.str != 0 {
                        str_of(l.str).to_string()
                    } else {
                        l.num.to_string()
                    };
                    (str_of(l.key).to_string(), v)
                })
                .collect()
        };
        // Sorted by reason, then stack.
        assert_eq!(frames(&p.sample[0]), ["deferred_split_folio", "do_anon"]);
        assert_eq!(p.sample[0].value, [5]);
        assert_eq!(
            labels(&p.sample[0]),
            [
                ("function".into(), "deferred_split_folio".into()),
                ("reason".into(), "FAULT_ALLOC".into()),
                ("comm".into(), "thp".into()),
                ("pid".into(), "8".into())
            ]
        );
        assert_eq!(
            frames(&p.sample[1]),
            ["deferred_split_folio", "zap_pmd_range", "main"]
        );
        assert_eq!(p.sample[1].value, [2]);
        assert_eq!(
            frames(&p.sample[2]),
            ["deferred_split_folio", "zap_pmd_range", "unmap_page_range"]
        );
        assert_eq!(p.sample[2].value, [3]);
        // zap_pmd_range+0x1f is one location, one function.
        assert_eq!(p.sample[1].location_id[1], p.sample[2].location_id[1]);
        assert_eq!(p.function.len(), 5);
        // The same stacks give the same bytes.
        assert_eq!(encode(&s, 1_000, 5), encode(&s.clone(), 1_000, 5));
        // No stacks: a valid, empty profile.
        assert!(decode(&encode(&HashMap::new(), 0, 0)).sample.is_empty());
    }

    #[test]
    fn function_names_leave_offsets_and_places_out() {
        assert_eq!(function_name("zap_pmd_range+0x1f"), "zap_pmd_range");
        assert_eq!(function_name("folio_add+0x2 (mm/rmap.c:12)"), "folio_add");
        assert_eq!(function_name("[unknown]"), "[unknown]");
        assert_eq!(function_name("+0x1"), "+0x1");
    }
}
