"""The bcc program: run-queue waits aggregated in the kernel per pod slot (sum, count, log2 histogram)."""

from __future__ import annotations

MAX_SLOTS = 2048  # pod slots; slot 0 is every task outside a pod
SLOT_STATS_WORDS = 2 + 32  # sum_ns, count, hist[32] (hist.SLOTS)

# Tracepoint arguments only (bcc reads their layout from tracefs, so the headers' kernel version does not matter)
# and no task_struct field. Enqueue stamps are keyed by the woken task's tid, the wait is charged to the task
# switched in, through tid_slot (filled by user space from <proc>/<tid>/cgroup, so one program serves cgroup v1
# and v2). A tid user space has not placed yet is counted per tid in `unknown` until it does. Every map is bounded;
# a task's entries go at its exit and its placement when it changes cgroup.
TEXT = r"""
#define NSLOTS 32
struct slot_stats { u64 sum; u64 count; u64 hist[NSLOTS]; };

BPF_TABLE("lru_hash", u32, u64, start, 32768);
BPF_TABLE("lru_hash", u32, u32, tid_slot, 65536);
BPF_ARRAY(stats, struct slot_stats, MAX_SLOTS);
BPF_TABLE("lru_hash", u32, struct slot_stats, unknown, 8192);

static __always_inline void enqueue(u32 tid)
{
    if (tid == 0)
        return;
    u64 ts = bpf_ktime_get_ns();
    start.update(&tid, &ts);
}

TRACEPOINT_PROBE(sched, sched_wakeup) { enqueue(args->pid); return 0; }
TRACEPOINT_PROBE(sched, sched_wakeup_new) { enqueue(args->pid); return 0; }

TRACEPOINT_PROBE(sched, sched_switch)
{
    /* prev_state reports 0 for a task that stays runnable and TASK_REPORT_MAX (0x100) when it was preempted;
       any state bit below that means it is going to sleep. */
    if ((args->prev_state & 0xff) == 0)
        enqueue(args->prev_pid);
    u32 tid = args->next_pid;
    if (tid == 0)
        return 0;
    u64 *tsp = start.lookup(&tid);
    if (!tsp)
        return 0;
    u64 delta = bpf_ktime_get_ns() - *tsp;
    start.delete(&tid);
    u32 bucket = bpf_log2l(delta / 1000);
    if (bucket >= NSLOTS)
        bucket = NSLOTS - 1;
    struct slot_stats *st;
    u32 *slot = tid_slot.lookup(&tid);
    if (slot) {
        st = stats.lookup(slot);
    } else {
        st = unknown.lookup(&tid);
        if (!st) {
            struct slot_stats zero = {};
            unknown.insert(&tid, &zero);
            st = unknown.lookup(&tid);
        }
    }
    if (!st)
        return 0;
    __sync_fetch_and_add(&st->sum, delta);
    __sync_fetch_and_add(&st->count, 1);
    __sync_fetch_and_add(&st->hist[bucket], 1);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit)
{
    u32 tid = args->pid;
    start.delete(&tid);
    tid_slot.delete(&tid);
    return 0;
}

TRACEPOINT_PROBE(cgroup, cgroup_attach_task)
{
    u32 tid = args->pid;
    tid_slot.delete(&tid);
    return 0;
}
""".replace("MAX_SLOTS", str(MAX_SLOTS))
