#!/usr/bin/env python3
"""Where the CPU goes, kernel included: reads `perf script -F comm,tid,ip,sym,dso`
of a `perf record -g -e cpu-clock` run (bench/cost/cpu-profile.sh) and splits
the samples by what the stack says they were doing: the program's own code,
farmem's code in the program, and in the kernel each part of the page path
(the fault and its signal, pread, pwrite, UFFDIO_COPY, write-protect, unmap).

FARMEM_BREAKDOWN times farmem's calls from the inside; this sees what it
cannot: the kernel's work before farmem's handler runs, inside each call
(memcg charging, TLB shootdowns, the copies), and in other processes.

usage: perf script -i perf.data -F comm,tid,ip,sym,dso | cpu-profile.py [--top N]
"""
import argparse
import collections
import sys

# A sample's main part: the first rule whose frame is on its stack decides,
# checked in this order (a fault taken inside a system call, or a signal
# delivered on the way out of one, counts as the fault or the signal).
SYSCALL_PARTS = [
    (("__x64_sys_pread64", "__x64_sys_preadv", "__x64_sys_preadv2", "do_preadv", "ksys_pread64"),
     "fetch: pread from memory files"),
    (("__x64_sys_pwrite64", "__x64_sys_pwritev", "__x64_sys_pwritev2", "do_pwritev", "ksys_pwrite64"),
     "write back: pwrite into memory files"),
    (("__x64_sys_process_madvise", "__do_sys_process_madvise", "__x64_sys_madvise", "do_madvise"),
     "unmap: madvise, process_madvise"),
    (("__x64_sys_sendmsg", "__x64_sys_recvmsg", "__x64_sys_sendto", "__x64_sys_recvfrom",
      "__sys_sendmsg", "__sys_recvmsg", "__sys_sendto", "__sys_recvfrom"),
     "sockets: send, receive"),
    (("__x64_sys_sched_yield", "do_sched_yield", "__x64_sys_futex", "do_futex", "__x64_sys_poll",
      "__x64_sys_ppoll", "do_sys_poll", "__x64_sys_epoll_wait", "do_epoll_wait"),
     "waiting: sched_yield, futex, poll"),
]
IOCTL_PARTS = [
    ("mfill_atomic_copy", "install: UFFDIO_COPY"),
    ("mfill_atomic_zeropage", "install: UFFDIO_ZEROPAGE"),
    ("mwriteprotect_range", "write-protect: UFFDIO_WRITEPROTECT"),
    ("move_pages", "UFFDIO_MOVE"),
]
# libc's system call wrappers: where farmem's calls enter and leave the
# kernel (user-space stacks are cut at them: libc has no frame pointers).
LIBC_WRAPPERS = {"syscall", "__GI___ioctl", "ioctl", "__libc_pread64", "__libc_pwrite64", "pread64",
                 "pwrite64", "__GI___pread64", "__GI___pwrite64", "preadv64", "pwritev64",
                 "__GI___libc_write", "__GI___libc_read", "madvise", "sched_yield", "__sched_yield"}
# Frames of the system call entry code, not of any one call.
ENTRY_CODE = {"x64_sys_call", "syscall_trace_enter", "syscall_user_dispatch", "syscall_exit_work",
              "syscall_exit_to_user_mode", "exit_to_user_mode_loop", "fdget", "fput"}
# Parts of the kernel's work that run inside several of the above: a sample
# may count in more than one of these, and in its main part too.
ACROSS = [
    ("the copies themselves (to and from user memory)",
     {"_copy_to_iter", "_copy_from_user", "copy_folio_from_iter_atomic", "copy_user_generic",
      "rep_movs_alternative", "copy_mc_enhanced_fast_string"}),
    ("memory cgroup charge and uncharge",
     {"__mem_cgroup_charge", "charge_memcg", "memcg1_commit_charge", "__mem_cgroup_uncharge",
      "__mem_cgroup_uncharge_folios", "uncharge_batch", "memcg1_uncharge_batch", "page_counter_uncharge"}),
    ("TLB shootdowns (interrupting the other CPUs)", {"smp_call_function_many_cond"}),
    ("page allocation and freeing",
     {"__alloc_frozen_pages_noprof", "vma_alloc_folio_noprof", "free_pages_and_swap_cache",
      "__free_frozen_pages", "free_unref_folios", "folios_put_refs"}),
    ("farmem's page checksums (CRC32C)", None),
]


def frames_of(lines):
    """(symbol, dso) per frame, leaf first."""
    out = []
    for ln in lines:
        ln = ln.strip()
        if not ln:
            continue
        parts = ln.split(None, 1)
        if len(parts) < 2:
            continue
        rest = parts[1]
        dso = ""
        if rest.endswith(")") and " (" in rest:
            rest, dso = rest.rsplit(" (", 1)
            dso = dso[:-1]
        sym = rest.split("+0x")[0]
        out.append((sym, dso))
    return out


def main_part(frames):
    syms = [s for s, _ in frames]
    present = set(syms)
    if "asm_exc_page_fault" in present or "exc_page_fault" in present:
        if "arch_do_signal_or_restart" in present:
            return "fault: the signal's delivery (frame, FPU state)"
        if "do_anonymous_page" in present and "handle_userfault" not in present:
            # One stack cannot tell the two apart: Linux allocates, zeroes
            # and charges a page for every write to an empty PTE, and only
            # then asks userfaultfd (mm/memory.c), which frees it again.
            return "fault: a new zeroed page (a first touch outside far memory, or a write to an absent far page, whose page is freed again)"
        return "fault: entry, userfaultfd and the rest"
    if "__x64_sys_rt_sigreturn" in present:
        return "signal return (FPU state restored)"
    if "arch_do_signal_or_restart" in present:
        return "fault: the signal's delivery (frame, FPU state)"
    if "__x64_sys_ioctl" in present:
        for f, name in IOCTL_PARTS:
            if f in present:
                return name
        return "ioctl, other"
    for fs, name in SYSCALL_PARTS:
        if present.intersection(fs):
            return name
    if "do_syscall_64" in present:
        # The frame just above do_syscall_64 names the call, where it was
        # not inlined; samples in the entry code itself have none.
        i = syms.index("do_syscall_64")
        inner = [s for s in syms[:i] if s not in ENTRY_CODE]
        if not inner:
            return "system call entry and exit"
        sysf = inner[-1]
        for prefix in ("__x64_sys_", "__do_sys_", "ksys_", "do_sys_"):
            sysf = sysf.replace(prefix, "")
        return "other system calls (%s)" % sysf
    leaf_sym, leaf_dso = frames[0] if frames else ("?", "?")
    if "libc.so" in leaf_dso and leaf_sym in LIBC_WRAPPERS:
        return "system calls' user side (libc's wrappers)"
    if leaf_dso.startswith("[kernel"):
        return "kernel, outside any call (interrupts, scheduling)"
    # farmem's handler runs on the program's stack, and calls libc.
    if any("libfarmem" in d for _, d in frames):
        return "farmem, user space"
    return "the program (its code and libraries)"


def across_parts(frames):
    present = {s for s, _ in frames}
    out = []
    for name, fs in ACROSS:
        if fs is None:
            if any("crc32" in s and "libfarmem" in d for s, d in frames[:1]):
                out.append(name)
        elif present & fs:
            out.append(name)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--top", type=int, default=25, help="leaf symbols to list (default 25)")
    ap.add_argument("--leaves", type=int, default=3, help="leaf symbols to list under each part (default 3)")
    args = ap.parse_args()
    parts = collections.Counter()
    across = collections.Counter()
    leaves = collections.Counter()
    part_leaves = collections.defaultdict(collections.Counter)
    comms = collections.Counter()
    total = 0
    sample = []
    header = None

    def flush():
        nonlocal total
        if header is None:
            return
        frames = frames_of(sample)
        total += 1
        comms[header.split()[0] if header.split() else "?"] += 1
        part = main_part(frames)
        parts[part] += 1
        for a in across_parts(frames):
            across[a] += 1
        if frames:
            s, d = frames[0]
            leaf = "%s (%s)" % (s, d.rsplit("/", 1)[-1])
            leaves[leaf] += 1
            part_leaves[part][leaf] += 1

    for line in sys.stdin:
        if not line.strip():
            flush()
            header, sample = None, []
        elif not line[0].isspace():
            flush()
            header, sample = line, []
        else:
            sample.append(line)
    flush()
    if total == 0:
        sys.exit("cpu-profile.py: no samples on standard input (was perf recorded with -g?)")

    def pct(n):
        return "%5.1f%%" % (100.0 * n / total)

    print("%d samples (cpu-clock), every process of the run" % total)
    print("\nby process: " + ", ".join("%s %s" % (c, pct(n).strip()) for c, n in comms.most_common(6)))
    print("\nwhere the CPU went (each sample counted once, by the first of: fault, signal, system call, user code)")
    for name, n in parts.most_common():
        if 1000 * n < total:
            continue
        print("  %s  %s" % (pct(n), name))
        for leaf, m in part_leaves[name].most_common(args.leaves):
            print("           %s  %s" % (pct(m), leaf[:120]))
    rest = sum(n for n in parts.values() if 1000 * n < total)
    print("  %s  everything under 0.1%% each" % pct(rest))
    print("\nacross those parts (a sample may count in several)")
    for name, _ in ACROSS:
        print("  %s  %s" % (pct(across[name]), name))
    print("\nleaf symbols")
    for name, n in leaves.most_common(args.top):
        print("  %s  %s" % (pct(n), name[:150]))


if __name__ == "__main__":
    main()
