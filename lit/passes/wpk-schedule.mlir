// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=4 min-tile-flops=1 min-tile-elems=1},wpk-arena,wpk-schedule{workers=4}' --verify-diagnostics | filecheck %s
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=4},wpk-schedule{workers=4}' --verify-diagnostics | filecheck %s --check-prefix=NOARENA
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=4 min-tile-flops=1 min-tile-elems=1},wpk-arena,wpk-schedule{workers=4 max-tile-words=1}' --verify-diagnostics | filecheck %s --check-prefix=AUTO
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=4},wpk-arena,wpk-schedule{workers=4},wpk-payload,wpk-schedule{workers=2}' --verify-diagnostics | filecheck %s --check-prefix=RESCHEDULE
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=2 min-tile-flops=1 min-tile-elems=1},wpk-arena,wpk-schedule{workers=2 handoff-us=5.0}' --verify-diagnostics | filecheck %s --check-prefix=APPEND
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=2 min-tile-flops=1 min-tile-elems=1},wpk-arena,wpk-schedule{workers=2 handoff-us=5.0 insertion-max-sessions=1}' --verify-diagnostics | filecheck %s --check-prefix=INSERT
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=2 min-tile-flops=1 min-tile-elems=1},wpk-arena,wpk-schedule{workers=2 handoff-us=5.0 task-costs="%S/Inputs/reset-in-a-gap-fits.timeline.json"}' --verify-diagnostics | filecheck %s --check-prefix=MEASURED-FITS
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=2 min-tile-flops=1 min-tile-elems=1},wpk-arena,wpk-schedule{workers=2 handoff-us=5.0 task-costs="%S/Inputs/reset-in-a-gap-too-long.timeline.json"}' --verify-diagnostics | filecheck %s --check-prefix=MEASURED-LONG
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=2 min-tile-flops=1 min-tile-elems=1},wpk-arena,wpk-schedule{workers=2 handoff-us=5.0 task-costs="%S/Inputs/reset-in-a-gap-8-sessions.timeline.json"}' --verify-diagnostics 2>&1 | filecheck %s --check-prefix=MEASURED-OTHER

// Every session range of a phase is a group with a counter of its own (counter 0 ends the beat). Each
// session's copy reads only that session's relu tile and runs right after it on the same worker: the
// worker order alone orders them, so no task waits and none signals a phase-wide counter.
builtin.module attributes {wave.cohort = 4 : i64} {
  func.func @two_phases() {
    %x = wave.input "x" : tensor<4x8xf32>
    %y = wave.ewise "relu(%0)"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    wave.output "y", %y : tensor<4x8xf32>
    func.return
  }
}
// CHECK:       wpk.granularity = "tile", wpk.granularity_why = "auto: 96 tracked words touched, within max-tile-words 67,108,864", wpk.counters = 9 : i64
// CHECK-SAME:  wpk.waits = 0 : i64, wpk.phase_waits = 0 : i64
// granularity=auto (the default) derives tile-level dependencies while the tasks touch at most
// max-tile-words tracked words in all (these touch 96); over it, a barrier per phase: one counter per phase.
// AUTO:        wpk.granularity = "phase", wpk.granularity_why = "auto: 96 tracked words touched, over max-tile-words 1", wpk.counters = 3 : i64
// Scheduling again drops the payloads, which encoded the schedule it replaces.
// RESCHEDULE-NOT: payload
// CHECK:       wpk.phase "ewise_1"
// CHECK-NEXT:    wpk.tasks "ewise" {{.*}}sessions = array<i64: 0, 1, 1, 2, 2, 3, 3, 4>{{.*}}worker = array<i64: [[WS:[0-9, ]+]]>, order = array<i64: 0, 0, 0, 0>, n_waits = array<i64: 0, 0, 0, 0>, waits = array<i64>, signal = array<i64: 1, 2, 3, 4>, signal_phase = array<i64: 0, 0, 0, 0>}
// CHECK:       wpk.phase "output_y"
// CHECK-NEXT:    wpk.tasks "ewise" {{.*}}sessions = array<i64: 0, 1, 1, 2, 2, 3, 3, 4>{{.*}}worker = array<i64: [[WS]]>, order = array<i64: 1, 1, 1, 1>, n_waits = array<i64: 0, 0, 0, 0>, waits = array<i64>, signal = array<i64: 5, 6, 7, 8>

// -----

// Tile-level dependencies: each session's row is computed by two tiles (on two workers); the matmul
// tiles of session s wait for the 2 tiles of session s's group only (count 2), never for the whole
// phase (count 4); so do the output copies, on the matmul's groups.
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @rows() {
    %x = wave.input "x" : tensor<2x1x8xf32>
    %a = wave.ewise "exp(%0)"(%x) : (tensor<2x1x8xf32>) -> tensor<2x1x8xf32>
    %w = wave.weight "w" : tensor<8x8xf32>
    %m = wave.matmul %a, %w : (tensor<2x1x8xf32>, tensor<8x8xf32>) -> tensor<2x1x8xf32>
    wave.output "m", %m : tensor<2x1x8xf32>
    func.return
  }
}
// CHECK:       wpk.phase_waits = 0 : i64
// CHECK:       wpk.phase "ewise_1"
// CHECK-NEXT:    wpk.tasks "ewise" {{.*}}sessions = array<i64: 0, 1, 0, 1, 1, 2, 1, 2>, elems = array<i64: 0, 4, 4, 8, 0, 4, 4, 8>{{.*}}signal = array<i64: [[S0:[0-9]+]], [[S0]], [[S1:[0-9]+]], [[S1]]>, signal_phase = array<i64: 0, 0, 0, 0>}
// CHECK:       wpk.phase "matmul_3"
// CHECK-NEXT:    wpk.tasks "matmul" {{.*}}sessions = array<i64: 0, 1, 0, 1, 1, 2, 1, 2>{{.*}}n_waits = array<i64: 1, 1, 1, 1>, waits = array<i64: [[S0]], 2, [[S0]], 2, [[S1]], 2, [[S1]], 2>, signal = array<i64: [[M0:[0-9]+]], [[M0]], [[M1:[0-9]+]], [[M1]]>
// CHECK:       wpk.phase "output_m"
// CHECK-NEXT:    wpk.tasks "ewise" {{.*}}sessions = array<i64: 0, 1, 0, 1, 1, 2, 1, 2>{{.*}}waits = array<i64: [[M0]], 2, [[M0]], 2, [[M1]], 2, [[M1]], 2>

// -----

// Scheduling needs the phases that wave-to-wpk makes.
builtin.module {
}
// CHECK: wave-to-wpk: the module has no wave.cohort attribute; run wave-cohort first

// The dependencies come from the placed offsets: without wpk-arena the pass refuses.
// NOARENA: wpk-schedule: buffers have no arena offsets; run wpk-arena first

// -----

// The baseline schedule (granularity=phase): every task of a phase waits for every task of the one
// before it, a grid-wide barrier per op (GPU measurements compare it with the tile-level default). Here
// each copy waits on the relu phase's one counter (both tiles: count 2), though it reads only its own
// session's tile, which the tile-level schedule (first case) waits for alone.
// RUN: wavec-opt %s --split-input-file -p 'wave-to-wpk{outputs-in-place=false states-in-place=false workers=2},wpk-arena,wpk-schedule{workers=2 granularity=phase}' --verify-diagnostics | filecheck %s --check-prefix=PHASE
builtin.module attributes {wave.cohort = 2 : i64} {
  func.func @barrier_baseline() {
    %x = wave.input "x" : tensor<2x8xf32>
    %y = wave.ewise "relu(%0)"(%x) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    wave.output "z", %y : tensor<2x8xf32>
    func.return
  }
}
// PHASE-LABEL: wpk.phase "output_z"
// PHASE-NEXT:    wpk.tasks "ewise" {{.*}}sessions = array<i64: 0, 1, 1, 2>{{.*}}n_waits = array<i64: 1, 1>, waits = array<i64: 1, 2, 1, 2>

// -----

// The insertion policy (insertion-max-sessions, HEFT's): the state reset is ready at the beat's start but
// has the lowest priority, so list scheduling takes it last. Appended, it runs after the exp on each worker
// (order 2); inserted, it fills the idle stretch each worker spends waiting for the other's matmul tile (a
// 5 us handoff here) and runs before the exp (order 1); tests/test_schedule_insertion.py checks that the
// modeled beat drops by the reset's own cost.
builtin.module attributes {wave.cohort = 1 : i64} {
  func.func @reset_in_a_gap() {
    %s = wave.state "s" : tensor<1x1x8xf32>
    %x = wave.input "x" : tensor<1x1x8xf32>
    %w = wave.weight "w" : tensor<8x64xf32>
    %m = wave.matmul %x, %w : (tensor<1x1x8xf32>, tensor<8x64xf32>) -> tensor<1x1x64xf32>
    %e = wave.ewise "exp(%0)"(%m) : (tensor<1x1x64xf32>) -> tensor<1x1x64xf32>
    %r = wave.ewise "cos(%0)"(%s) : (tensor<1x1x8xf32>) -> tensor<1x1x8xf32>
    wave.output "e", %e : tensor<1x1x64xf32>
    wave.state_write "s", %r : tensor<1x1x8xf32>
    func.return
  }
}
// APPEND:      wpk.phase "reset_s"
// APPEND-NEXT:   wpk.tasks "ewise" {{.*}}worker = array<i64: 0, 1>, order = array<i64: 2, 2>
// APPEND:      wpk.phase "ewise_4"
// APPEND-NEXT:   wpk.tasks "ewise" {{.*}}worker = array<i64: 0, 1>, order = array<i64: 1, 1>
// INSERT:      wpk.phase "reset_s"
// INSERT-NEXT:   wpk.tasks "ewise" {{.*}}worker = array<i64: 0, 1>, order = array<i64: 1, 1>
// INSERT:      wpk.phase "ewise_4"
// INSERT-NEXT:   wpk.tasks "ewise" {{.*}}worker = array<i64: 0, 1>, order = array<i64: 2, 2>
// Measured task costs (task-costs: a timeline of this program traced on the GPU) replace the model's: each
// task is charged its phase's measured body, and the insertion policy runs whatever the cohort, since the
// gaps it fills are measured ones. A 1 us reset fits the 5 us gap the matmul's handoff leaves (order 1);
// a 20 us one does not, and leads instead (its own cost makes it the longest path): the beat is then the reset,
// the matmul and three 1 us tasks each behind a 5 us handoff (the exp, the cos, the state write), 20 + 10 + 3 x 6
// = 48 us. The module records what
// it charged, for the modeled timeline to replay; costs traced for another cohort are refused.
// MEASURED-FITS:      wpk.measured_us = {task_gap_us = 0.000000e+00 : f64, phases = {reset_s = 1.000000e+00 : f64, matmul_3 = 1.000000e+01 : f64
// MEASURED-FITS:      wpk.phase "reset_s"
// MEASURED-FITS-NEXT:   wpk.tasks "ewise" {{.*}}worker = array<i64: 0, 1>, order = array<i64: 1, 1>
// MEASURED-LONG:      wpk.beat_us = 4.800000e+01
// MEASURED-LONG:      wpk.phase "reset_s"
// MEASURED-LONG-NEXT:   wpk.tasks "ewise" {{.*}}worker = array<i64: 0, 1>, order = array<i64: 0, 0>
// MEASURED-OTHER: wpk-schedule: task costs {{.*}}reset-in-a-gap-8-sessions.timeline.json: measured for a cohort of 8 on 2 workers, but the program is for a cohort of 1 on 2
