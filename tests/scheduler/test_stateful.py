"""A hypothesis state machine plays the Recall Manager against the scheduler with every
call in any order (submit, choose, complete, cancel, accelerate, feedback, time passing)
and checks the bookkeeping after each step against a model of what must hold:

- a task is never granted while it has a quantum in flight, nor while suspended;
- every granted quantum is completed exactly once (cancelled ones included) and
  ``in_flight`` counts them;
- the snapshot agrees with the model's states; tickets never drop below the floor;
- a suspended task is discarded, with its whole event, exactly when ``now >= deadline``;
- once every event is cancelled and every quantum returned, nothing is left behind
  (cancelled tasks leave no memory behind).
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from scheduler import ManualClock, Priority, SchedulerConfig, StrideScheduler, TaskState, UnknownEvent

EIDS = ["a", "b", "c", "d"]


class SchedulerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(0.0)
        self.s = StrideScheduler(
            SchedulerConfig(tickets_per_result=1, min_tickets=2, light_load=0.5, background_slots=1),
            clock=self.clock,
        )
        self.state: dict[str, TaskState] = {}  # model: live tasks
        self.eid_of: dict[str, str] = {}
        self.deadline: dict[str, float] = {}
        self.flying: list[str] = []  # granted, not completed (orphans included)

    @rule(
        eid=st.sampled_from(EIDS),
        tickets=st.integers(2, 50),
        mat=st.booleans(),
        period=st.none() | st.integers(1, 2),
    )
    def submit(self, eid, tickets, mat, period):
        prio = Priority.MATERIALIZATION if mat else Priority.QUERY
        tid = self.s.submit(eid, tickets=tickets, priority=prio, feedback_period=period, feedback_timeout=2.0)
        self.state[tid] = TaskState.RUNNABLE
        self.eid_of[tid] = eid

    @rule(load=st.none() | st.floats(0, 1))
    def choose(self, load):
        g = self.s.choose(load=load)
        runnable = [t for t, st_ in self.state.items() if st_ is TaskState.RUNNABLE]
        if g is None:
            assert not runnable or all(
                self.s.task(t).priority is Priority.MATERIALIZATION for t in runnable
            ), "nothing chosen although a query task was runnable"
            return
        assert self.state.get(g.task_id) is TaskState.RUNNABLE, f"granted {g.task_id} in state {self.state.get(g.task_id)}"
        if g.priority is Priority.MATERIALIZATION:
            assert not any(self.s.task(t).priority is Priority.QUERY for t in runnable) or (
                load is not None and load < 0.5
            )
        self.state[g.task_id] = TaskState.RUNNING
        self.flying.append(g.task_id)

    @precondition(lambda self: self.flying)
    @rule(k=st.integers(0, 100), results=st.integers(0, 30), done=st.integers(0, 5).map(lambda x: x == 0))
    def complete(self, k, results, done):
        tid = self.flying.pop(k % len(self.flying))
        events = self.s.complete(tid, results=results, done=done)
        if tid not in self.state:  # cancelled or discarded while running
            assert events == ()
            return
        kinds = {e.kind for e in events}
        if done:
            assert "task_finished" in kinds
            del self.state[tid]
        elif "task_suspended" in kinds:
            self.state[tid] = TaskState.SUSPENDED
            self.deadline[tid] = self.clock.now() + 2.0
        else:
            self.state[tid] = TaskState.RUNNABLE

    @rule(eid=st.sampled_from(EIDS))
    def cancel(self, eid):
        live = [t for t in self.state if self.eid_of[t] == eid]
        if not live:
            try:
                self.s.cancel(eid)
            except UnknownEvent:
                return
            raise AssertionError(f"cancel({eid!r}) of an event without tasks did not raise")
        assert sorted(self.s.cancel(eid)) == sorted(live)
        for t in live:
            del self.state[t]

    @rule(eid=st.sampled_from(EIDS), n=st.integers(1, 20))
    def accelerate(self, eid, n):
        live = [t for t in self.state if self.eid_of[t] == eid]
        if not live:
            return
        before = {t: self.s.task(t).tickets for t in live}
        self.s.accelerate(eid, n)
        for t in live:
            assert self.s.task(t).tickets == before[t] + n
            if self.state[t] is TaskState.SUSPENDED:
                self.state[t] = TaskState.RUNNABLE

    @rule(eid=st.sampled_from(EIDS))
    def feedback(self, eid):
        live = [t for t in self.state if self.eid_of[t] == eid]
        if not live:
            return
        resumed = self.s.feedback(eid)
        assert sorted(resumed) == sorted(t for t in live if self.state[t] is TaskState.SUSPENDED)
        for t in resumed:
            self.state[t] = TaskState.RUNNABLE

    @rule(dt=st.sampled_from([0.0, 1.0, 2.0, 3.5]))
    def time_passes(self, dt):
        self.clock.advance(dt)
        self._tick()

    @rule(early=st.booleans())
    def wait_for_the_next_deadline(self, early):
        deadline = self.s.next_deadline()
        assert deadline == min((self.deadline[t] for t, s_ in self.state.items() if s_ is TaskState.SUSPENDED), default=None)
        if deadline is not None:
            self.clock.set(max(self.clock.now(), deadline - 0.25 if early else deadline))
        self._tick()

    def _tick(self):
        now = self.clock.now()
        late = {self.eid_of[t] for t, s_ in self.state.items() if s_ is TaskState.SUSPENDED and now >= self.deadline[t]}
        dropped = self.s.tick()
        assert {d.eid for d in dropped} == late
        for d in dropped:
            del self.state[d.task_id]

    @invariant()
    def bookkeeping_agrees(self):
        snap = {t.task_id: t for t in self.s.tasks()}
        assert set(snap) == set(self.state)
        for tid, info in snap.items():
            assert info.state is self.state[tid], f"{tid}: {info.state} vs model {self.state[tid]}"
            assert info.tickets >= 2
            assert (info.deadline is not None) == (info.state is TaskState.SUSPENDED)
        assert self.s.in_flight() == len(self.flying)

    def teardown(self):
        for eid in list(self.s.events()):
            self.s.cancel(eid)
        for tid in self.flying:
            self.s.complete(tid)
        assert len(self.s) == 0 and self.s.events() == () and self.s.in_flight() == 0
        for q in self.s._queues.values():
            assert len(q) == 0 and q.global_tickets == 0 and q.runnable_count == 0


SchedulerMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
test_scheduler_state_machine = SchedulerMachine.TestCase
