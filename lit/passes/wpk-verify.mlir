// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=2},wpk-arena,wpk-schedule{workers=2},wpk-payload,wpk-verify' | filecheck %s
// RUN: wavec-opt %S/Inputs/wpk-verify-race.mlir -p wpk-verify --verify-diagnostics | filecheck %s --check-prefix=RACE
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=2},wpk-arena,wpk-schedule{workers=2},wpk-payload,wpk-verify{max-incidences=1 level=task}' 2>&1 | filecheck %s --check-prefix=BUDGET
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=2},wpk-arena,wpk-schedule{workers=2 granularity=phase},wpk-payload,wpk-verify{max-incidences=1}' | filecheck %s --check-prefix=PHASE
// RUN: wavec-opt %S/Inputs/wpk-verify-race.mlir -p 'wpk-verify{level=phase}' --verify-diagnostics | filecheck %s --check-prefix=RACE
// RUN: wavec-opt %s -p 'wpk-verify{level=bogus}' --verify-diagnostics | filecheck %s --check-prefix=LEVEL
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=2},wpk-verify' --verify-diagnostics | filecheck %s --check-prefix=UNSCHEDULED

// The pipeline's own schedule verifies: the pass leaves the program unchanged.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @two_phases() {
    %x = wave.input "x" : tensor<2x8xf32>
    %y = wave.ewise "relu(%0)"(%x) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    wave.output "y", %y : tensor<2x8xf32>
    func.return
  }
}
// CHECK:       wpk.verified = "verified: 4 tasks, {{[0-9]+}} edges, {{[0-9]+}} conflicting pairs ordered"
// CHECK:       wpk.phase "ewise_1"
// At level task, over the memory budget the program is left unproved, with a warning and the reason in
// wpk.verified (counting stops once it passes the budget: the 6 segments of these tasks count as "at least 2").
// BUDGET:      wpk-verify: warning: not verified: 4 tasks touch at least 2 word segments
// BUDGET:      wpk.verified = "not verified: 4 tasks
// Over the budget, level auto proves it phase by phase: with a barrier between the phases, the copy's
// phase runs after all of the relu's, which the clocks show without looking at a pair of tasks.
// PHASE:       wpk.verified = "verified at phase level: 4 tasks, 6 edges, 1 phase pair sharing bytes ordered in program order (0 tile by tile)"
// LEVEL:       wpk-verify: level must be one of auto, task, phase, got 'bogus'
// It proves the encoded program: before the schedule and the payloads there is nothing to prove.
// UNSCHEDULED: wpk-verify: the module has no wpk.counters, wpk.arena_bytes, wpk.act_lower_bound; run wpk-arena, wpk-schedule and wpk-payload first
// Session 0's copy runs on the worker that computed session 0's relu, right after it: worker order alone
// orders them, so it waits on nothing.
// CHECK:       wpk.phase "output_y"
// CHECK-NEXT:    wpk.tasks "ewise" {{.*}}sessions = array<i64: 0, 1, 1, 2>{{.*}}worker = array<i64: 0, 1>, order = array<i64: 1, 1>, n_waits = array<i64: 0, 0>, waits = array<i64>

// The same program with session 0's copy moved to worker 1 and its wait dropped: it reads what worker 0
// writes with nothing ordering the two (Inputs/wpk-verify-race.mlir). The phase level finds the two phases
// not ordered as wholes, checks them tile by tile, and names the same pair.
// RACE: wpk-verify: race (read-after-write) on act arena bytes [0, 32) (tensor {{.*}}t1{{.*}}, session 0, byte 0): task 0 {{.*}} and task 2 {{.*}}neither happens before the other
