//! Reading the counters: per-reason totals from the slot array plus the
//! per-address counts of call sites not yet resolved, resolving new sites
//! as they appear.

use std::collections::HashMap;

use crate::error::Result;
use crate::kallsyms::Kallsyms;
use crate::probe::Probe;
use crate::reasons::{Mapper, SourceLookup, NR_SLOTS};

#[derive(Debug, Default)]
pub struct Poller {
    /// Every return address seen in the pending table, and its slot.
    sites: HashMap<u64, u32>,
}

impl Poller {
    /// Cumulative per-slot totals. Calls from a site counted while it was
    /// pending stay in the pending table and are added here under the
    /// site's reason, so a new caller's first calls are neither lost nor
    /// misfiled. The work is proportional to the number of distinct call
    /// sites, not of calls.
    pub fn totals(
        &mut self,
        probe: &Probe<'_>,
        ksyms: &Kallsyms,
        mapper: &mut Mapper,
        mut src: Option<&mut (dyn SourceLookup + '_)>,
    ) -> Result<Vec<u64>> {
        let mut totals = probe.counts()?;
        totals.resize(NR_SLOTS, 0);
        for (ret, n) in probe.pending()? {
            let slot = match self.sites.get(&ret) {
                Some(&s) => s,
                None => {
                    let s = mapper.classify(ksyms, ret, src.as_deref_mut());
                    // A full site table leaves the site pending: its calls
                    // are still counted, here, under the right reason.
                    probe.add_site(ret, s)?;
                    self.sites.insert(ret, s);
                    s
                }
            };
            totals[slot as usize] = totals[slot as usize].wrapping_add(n);
        }
        Ok(totals)
    }

    /// Distinct call sites seen so far.
    pub fn sites(&self) -> usize {
        self.sites.len()
    }
}
