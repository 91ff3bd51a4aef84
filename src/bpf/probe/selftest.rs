//! The counting and stack paths run through BPF_PROG_TEST_RUN on a raw_tp
//! wrapper: the kernel side checked on kernels that refuse fentry.

use std::mem::MaybeUninit;
use std::os::fd::AsFd;

use libbpf_rs::skel::OpenSkel;
use libbpf_rs::OpenObject;

use super::{counting, open_for, set_filter, Counting, Mode, Owner, Probe, Programs};
use crate::bpf::abi::{LoadConfig, SELFTEST_ARGS};
use crate::host::Features;

/// Loads the object with only the self-test program (needs root).
pub(crate) fn load<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &LoadConfig,
) -> Probe<'obj> {
    load_on(storage, config, &Features::probe())
}

/// `load`, as for a kernel with `host`'s features.
pub(crate) fn load_on<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &LoadConfig,
    host: &Features,
) -> Probe<'obj> {
    let open = open_for(storage, config, "selftest", Programs::SelfTest, host).expect("open");
    let skel = open
        .load()
        .expect("load the raw_tp self-test program (needs root)");
    set_filter(&skel, &config.filter).expect("the filter's maps");
    let which = Counting::of(config, host);
    Probe::new(skel, Mode::Kprobe, which, "selftest", None).expect("the maps")
}

/// The raw_tp context of one run: the caller's return address, then
/// up to 11 frames above it (for deeper-frame rules).
pub(crate) fn context(frames: &[u64]) -> Vec<u8> {
    let mut args = [0u64; SELFTEST_ARGS];
    for (a, f) in args.iter_mut().zip(frames) {
        *a = *f;
    }
    args.iter().flat_map(|a| a.to_ne_bytes()).collect()
}

impl Probe<'_> {
    /// Runs the counting path `repeat` times on return address `ret`.
    pub(crate) fn test_count(&self, ret: u64, repeat: u32) {
        self.test_count_stack(&[ret], repeat)
    }

    /// Like `test_count`, with `frames[0]` the caller's return address
    /// and the rest the frames above it.
    pub(crate) fn test_count_stack(&self, frames: &[u64], repeat: u32) {
        // raw_tp test runs take no repeat count: run it that many times.
        for _ in 0..repeat {
            self.test_run(frames, None);
        }
    }

    /// Runs the counting path once on return address `ret`, on CPU `cpu`.
    pub(crate) fn test_count_on(&self, ret: u64, cpu: u32) {
        self.test_run(&[ret], Some(cpu));
    }

    /// One run of the self-test program on `frames`, on CPU `cpu` if
    /// given.
    fn test_run(&self, frames: &[u64], cpu: Option<u32>) {
        let mut ctx = context(frames);
        let mut input = libbpf_rs::ProgramInput {
            context_in: Some(&mut ctx),
            ..Default::default()
        };
        if let Some(cpu) = cpu {
            input.cpu = cpu;
            input.flags = libbpf_sys::BPF_F_TEST_RUN_ON_CPU;
        }
        self.selftest_prog()
            .test_run(input)
            .expect("run the self-test program");
    }

    pub(crate) fn selftest_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.selftest_prog().as_fd()
    }

    fn selftest_prog(&self) -> &libbpf_rs::ProgramMut<'_> {
        let Owner::Loaded { skel, which, .. } = &self.owner else {
            panic!("a loaded object");
        };
        let mode = (self.mode == Mode::RawTp).then_some(Mode::RawTp);
        counting(skel, mode, *which)
    }
}

/// Loads the object with the raw tracepoint's counting program (td_rawtp),
/// not attached: BPF_PROG_TEST_RUN runs it from the test-run code, which
/// `config.glue` then has to name as the tracepoint's glue.
pub(crate) fn load_rawtp<'obj>(
    storage: &'obj mut MaybeUninit<OpenObject>,
    config: &LoadConfig,
) -> Probe<'obj> {
    let host = Features::probe();
    let open = open_for(
        storage,
        config,
        "selftest",
        Programs::Trace(Mode::RawTp, None),
        &host,
    )
    .expect("open");
    let skel = open.load().expect("load the raw_tp program (needs root)");
    let which = Counting::of(config, &host);
    Probe::new(skel, Mode::RawTp, which, "selftest", None).expect("the maps")
}
