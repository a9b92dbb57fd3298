"""The bcc program: run-queue waits aggregated in the kernel per pod slot (sum, count, log2 histogram)."""

from __future__ import annotations

MAX_SLOTS = 2048  # pod slots; slot 0 is every task outside a pod
SLOT_STATS_WORDS = 2 + 32  # sum_ns, count, hist[32] (hist.SLOTS)

# Tracepoint arguments and BTF offsets only, never a task_struct layout from headers (Debian's are older than the
# running kernel). Enqueue stamps are keyed by the woken task's tid, the wait is charged to the task switched in,
# through tid_slot (filled by user space from <proc>/<tid>/cgroup, so one program serves cgroup v1 and v2). A tid
# user space has not placed yet is counted per tid in `unknown` until it does. Every map is bounded; a task's
# entries go at its exit and its placement when it changes cgroup.
_COMMON = r"""
#define NSLOTS 32
struct slot_stats { u64 sum; u64 count; u64 hist[NSLOTS]; };

BPF_TABLE("lru_hash", STAMP_KEY, u64, start, 32768);
BPF_TABLE("lru_hash", u32, u32, tid_slot, 65536);
BPF_ARRAY(stats, struct slot_stats, MAX_SLOTS);
BPF_TABLE("lru_hash", u32, struct slot_stats, unknown, 8192);

/* A task's stamp is written in place and zeroed once taken: no map element allocated or freed per event (exit
   deletes it; the LRU bounds tasks that never exit). */
static __always_inline void enqueue(STAMP_KEY key)
{
    u64 ts = bpf_ktime_get_ns();
    u64 *tsp = start.lookup(&key);
    if (tsp)
        *tsp = ts;
    else
        start.update(&key, &ts);
}

/* The wait of a task switched in, 0 if it has no stamp. */
static __always_inline u64 take(STAMP_KEY key)
{
    u64 *tsp = start.lookup(&key);
    if (!tsp)
        return 0;
    u64 ts = *tsp;
    if (ts == 0)
        return 0;
    *tsp = 0;
    return bpf_ktime_get_ns() - ts;
}

/* The wait goes to the task's pod slot (or, unplaced, to its tid). */
static __always_inline void charge(u32 tid, u64 delta)
{
    if (tid == 0 || delta == 0)
        return;
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
        return;
    __sync_fetch_and_add(&st->sum, delta);
    __sync_fetch_and_add(&st->count, 1);
    __sync_fetch_and_add(&st->hist[bucket], 1);
}

TRACEPOINT_PROBE(cgroup, cgroup_attach_task)
{
    u32 tid = args->pid;
    tid_slot.delete(&tid);
    return 0;
}
""".replace("MAX_SLOTS", str(MAX_SLOTS))

# Classic tracepoints: the kernel builds each event's argument record, whose layout bcc reads from tracefs. Stamps
# are keyed by tid.
_CLASSIC = r"""
static __always_inline void enqueue_tid(u32 tid)
{
    if (tid != 0)
        enqueue(tid);
}

TRACEPOINT_PROBE(sched, sched_wakeup) { enqueue_tid(args->pid); return 0; }
TRACEPOINT_PROBE(sched, sched_wakeup_new) { enqueue_tid(args->pid); return 0; }

TRACEPOINT_PROBE(sched, sched_switch)
{
    /* prev_state reports 0 for a task that stays runnable and TASK_REPORT_MAX (0x100) when it was preempted;
       any state bit below that means it is going to sleep. */
    if ((args->prev_state & 0xff) == 0)
        enqueue_tid(args->prev_pid);
    u32 tid = args->next_pid;
    if (tid != 0)
        charge(tid, take(tid));
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit)
{
    u32 tid = args->pid;
    start.delete(&tid);
    tid_slot.delete(&tid);
    return 0;
}
"""

# Raw tracepoints: the TP_PROTO arguments as they are (task_struct pointers), no record built. Stamps are keyed by
# the task_struct pointer, so a wakeup reads no field; the tid of the task switched in is read (at its BTF offset,
# passed as -D flags by ebpf.raw_layout, never from the headers bcc compiles against) only when it has a stamp;
# prev is `current` there, so its tid comes from bpf_get_current_pid_tgid. sched_switch(bool preempt, prev, next[,
# unsigned int prev_state]): prev stays queued when preempted or still TASK_RUNNING (the state sampled by
# __schedule, an argument since 5.18; else read from prev).
_RAW = r"""
static __always_inline u32 task_pid(u64 task)
{
    u32 pid = 0;
    bpf_probe_read_kernel(&pid, sizeof(pid), (void *)(task + TASK_PID_OFF));
    return pid;
}

RAW_TRACEPOINT_PROBE(sched_wakeup) { enqueue(ctx->args[0]); return 0; }
RAW_TRACEPOINT_PROBE(sched_wakeup_new) { enqueue(ctx->args[0]); return 0; }

RAW_TRACEPOINT_PROBE(sched_switch)
{
#ifdef SWITCH_STATE_ARG
    u32 state = (u32)ctx->args[3];
#else
    u32 state = 0;
    bpf_probe_read_kernel(&state, sizeof(state), (void *)(ctx->args[1] + TASK_STATE_OFF));
#endif
    if (((u8)ctx->args[0] || state == 0) && (u32)bpf_get_current_pid_tgid() != 0)
        enqueue(ctx->args[1]);
    u64 delta = take(ctx->args[2]);
    if (delta)
        charge(task_pid(ctx->args[2]), delta);
    return 0;
}

RAW_TRACEPOINT_PROBE(sched_process_exit)
{
    u64 key = ctx->args[0];
    start.delete(&key);
    u32 tid = task_pid(key);
    tid_slot.delete(&tid);
    return 0;
}
"""


def text(raw: bool) -> str:
    """The program with raw tracepoints (compile with ebpf.raw_layout's -D flags) or classic ones."""
    return _COMMON.replace("STAMP_KEY", "u64" if raw else "u32") + (_RAW if raw else _CLASSIC)


TEXT = text(False)
