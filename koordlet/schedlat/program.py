"""The bcc program: run-queue waits aggregated in the kernel per pod slot (sum, count, log2 histogram), per CPU."""

from __future__ import annotations

MAX_SLOTS = 2048  # pod slots; slot 0 is every task outside a pod
SLOT_STATS_WORDS = 2 + 32  # sum_ns, count, hist[32] (hist.SLOTS)

# Tracepoint arguments and BTF offsets only, never a task_struct layout from headers (Debian's are older than the
# running kernel). Each task has one entry in `tasks`, keyed by tid, holding its pod slot and what the program last
# saw of it. Waits go to the slot's per-CPU stats (no atomics, no shared cache lines). A task user space has not
# placed yet (slot UNPLACED) is counted per tid in `unknown` until user space has read its <proc>/<tid>/cgroup and
# put its slot in `placements`, which the program moves into the task's entry: one program for cgroup v1 and v2.
# Every map is bounded; a task's entry goes at its exit (the LRU bounds tasks that never exit), and its slot is
# forgotten when it changes cgroup.
_COMMON = r"""
#define NSLOTS 32
#define UNPLACED 0xffffffff
struct slot_stats { u64 sum; u64 count; u64 hist[NSLOTS]; };
struct task_state { u64 seen; u64 delay; u32 slot; u32 tid; };

BPF_TABLE("lru_hash", u32, struct task_state, tasks, 65536);
BPF_PERCPU_ARRAY(stats, struct slot_stats, MAX_SLOTS);
BPF_TABLE("lru_hash", u32, struct slot_stats, unknown, 8192);
BPF_TABLE("lru_hash", u32, u32, placements, 8192);  /* full: the oldest goes, that task is placed again */

/* `count` waits of `sum` ns in all (count is 1 but where two waits are seen at once: the bucket is their mean)
   to the task's slot, or, unplaced, to its tid. */
static __always_inline void charge(struct task_state *t, u64 sum, u64 count)
{
    u32 bucket = bpf_log2l(sum / count / 1000);
    if (bucket >= NSLOTS)
        bucket = NSLOTS - 1;
    u32 tid = t->tid;
    u32 slot = t->slot;
    if (slot == UNPLACED) {
        /* placed by user space since? (it never writes `tasks`: a write racing this program's would lose or
           repeat a wait) */
        u32 *placed = placements.lookup(&tid);
        if (placed) {
            slot = *placed;
            t->slot = slot;
            placements.delete(&tid);
        }
    }
    if (slot != UNPLACED) {
        struct slot_stats *st = stats.lookup(&slot);
        if (st) {
            st->sum += sum;
            st->count += count;
            st->hist[bucket] += count;
        }
        return;
    }
    struct slot_stats *u = unknown.lookup(&tid);
    if (!u) {
        struct slot_stats zero = {};
        unknown.insert(&tid, &zero);
        u = unknown.lookup(&tid);
        if (!u)
            return;
    }
    __sync_fetch_and_add(&u->sum, sum);
    __sync_fetch_and_add(&u->count, count);
    __sync_fetch_and_add(&u->hist[bucket], count);
}

TRACEPOINT_PROBE(cgroup, cgroup_attach_task)
{
    u32 tid = args->pid;
    struct task_state *t = tasks.lookup(&tid);
    if (t)
        t->slot = UNPLACED;
    placements.delete(&tid);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit)
{
    u32 tid = args->pid;
    tasks.delete(&tid);
    placements.delete(&tid);
    return 0;
}
""".replace("MAX_SLOTS", str(MAX_SLOTS))

# Classic tracepoints (no BTF): the program stamps a task when it becomes runnable (woken, new, or switched out
# still runnable: `seen` is the stamp) and charges the wait to the task switched in. The records' layout is read by
# bcc from tracefs.
_CLASSIC = r"""
static __always_inline void stamp(u32 tid)
{
    if (tid == 0)
        return;
    u64 ts = bpf_ktime_get_ns();
    struct task_state *t = tasks.lookup(&tid);
    if (t) {
        t->seen = ts;
        return;
    }
    struct task_state fresh = {.seen = ts, .slot = UNPLACED, .tid = tid};
    tasks.update(&tid, &fresh);
}

TRACEPOINT_PROBE(sched, sched_wakeup) { stamp(args->pid); return 0; }
TRACEPOINT_PROBE(sched, sched_wakeup_new) { stamp(args->pid); return 0; }

TRACEPOINT_PROBE(sched, sched_switch)
{
    /* prev_state reports 0 for a task that stays runnable and TASK_REPORT_MAX (0x100) when it was preempted;
       any state bit below that means it is going to sleep. */
    if ((args->prev_state & 0xff) == 0)
        stamp(args->prev_pid);
    u32 tid = args->next_pid;
    if (tid == 0)
        return 0;
    struct task_state *t = tasks.lookup(&tid);
    if (!t || t->seen == 0)
        return 0;
    u64 delta = bpf_ktime_get_ns() - t->seen;
    t->seen = 0;
    if (delta)
        charge(t, delta, 1);
    return 0;
}
"""

# Raw tracepoint (BTF): the kernel already stamps every enqueue and adds each wait to the task's
# sched_info.run_delay, counting arrivals in sched_info.pcount (CONFIG_SCHED_INFO, kernel/sched/stats.h), at the
# switch-in, just after this tracepoint. So one program on sched_switch reads prev's two counters (prev is current:
# its tid costs nothing) at their BTF offsets, passed as -D flags by loader.raw_layout, and charges what they grew
# by since it last left the CPU: the wait that ended when it last came on. No wakeup program, no clock read, one map
# lookup per switch. sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next[, ...]).
_RAW = r"""
RAW_TRACEPOINT_PROBE(sched_switch)
{
    u32 tid = (u32)bpf_get_current_pid_tgid();
    if (tid == 0)
        return 0;
    u64 info[2] = {};  /* pcount, run_delay */
#ifdef SI_ADJACENT
    bpf_probe_read_kernel(info, sizeof(info), (void *)(ctx->args[1] + SI_PCOUNT_OFF));
#else
    bpf_probe_read_kernel(&info[0], 8, (void *)(ctx->args[1] + SI_PCOUNT_OFF));
    bpf_probe_read_kernel(&info[1], 8, (void *)(ctx->args[1] + SI_DELAY_OFF));
#endif
    struct task_state *t = tasks.lookup(&tid);
    if (!t) {
        struct task_state fresh = {.seen = info[0], .delay = info[1], .slot = UNPLACED, .tid = tid};
        tasks.update(&tid, &fresh);
        return 0;
    }
    u64 count = info[0] - t->seen;
    if (count == 0)
        return 0;
    u64 sum = info[1] - t->delay;
    t->seen = info[0];
    t->delay = info[1];
    charge(t, sum, count);
    return 0;
}
"""


def text(raw: bool) -> str:
    """The program on the raw sched_switch tracepoint (compile with loader.raw_layout's -D flags) or the classic
    one."""
    return _COMMON + (_RAW if raw else _CLASSIC)


TEXT = text(False)
