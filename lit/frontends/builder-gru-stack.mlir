// RUN: wavec import gru_stack:tiny | filecheck %s
// RUN: wavec import gru_stack:tiny | wavec-opt | filecheck %s --check-prefix=ROUNDTRIP

// The builder's wave IR for the zoo's tiny GRU stack (wavec/zoo/recurrent.py): per layer one explicit
// state, the input and recurrent projections as wave.matmul with their biases, PyTorch's gates (r, z, n)
// as two four-input ewise ops over slices, the state write once, and a linear readout. Random weights
// are named only (seeded specs, not in the IR).

// CHECK:       // wave IR of gru_stack_tiny (wavec builder): one session, one beat. Weights are not included: 10 weights (11,400 parameters)
// CHECK-LABEL: func.func @gru_stack_tiny()
// CHECK:         %[[X:.*]] = wave.input "x" : tensor<16xf32>
// CHECK:         %[[H:.*]] = wave.state "gru0.h" : tensor<32xf32>
// CHECK:         %[[W:.*]] = wave.weight "gru0.W" : tensor<16x96xf32>
// CHECK:         %[[R:.*]] = wave.weight "gru0.R" : tensor<32x96xf32>
// CHECK:         %[[XR:.*]] = wave.reshape %[[X]] : (tensor<16xf32>) -> tensor<1x16xf32>
// CHECK:         %[[XW:.*]] = wave.matmul %[[XR]], %[[W]] : (tensor<1x16xf32>, tensor<16x96xf32>) -> tensor<1x96xf32>
// CHECK:         wave.ewise "add(%0, %1)"(%[[XW]], %{{.*}}) : (tensor<1x96xf32>, tensor<96xf32>) -> tensor<1x96xf32>
// CHECK:         %[[HR:.*]] = wave.reshape %[[H]] : (tensor<32xf32>) -> tensor<1x32xf32>
// CHECK:         wave.matmul %[[HR]], %[[R]] : (tensor<1x32xf32>, tensor<32x96xf32>) -> tensor<1x96xf32>
// CHECK-COUNT-6: wave.slice
// CHECK:         %[[N:.*]] = wave.ewise "tanh(add(%0, mul(sigmoid(add(%1, %2)), %3)))"
// CHECK:         %[[H2:.*]] = wave.ewise "add(mul(sub(1.0, sigmoid(add(%0, %1))), %2), mul(sigmoid(add(%0, %1)), %3))"(%{{.*}}, %{{.*}}, %[[N]], %{{.*}}) : ({{.*}}) -> tensor<1x32xf32>
// CHECK:         %[[H2V:.*]] = wave.reshape %[[H2]] : (tensor<1x32xf32>) -> tensor<32xf32>
// CHECK:         wave.state "gru1.h" : tensor<32xf32>
// The second layer reads the first layer's new state directly (a reshape of a reshape is bypassed).
// CHECK:         wave.matmul %[[H2]], %{{.*}} : (tensor<1x32xf32>, tensor<32x96xf32>) -> tensor<1x96xf32>
// CHECK:         wave.weight "readout.w" : tensor<32x8xf32>
// CHECK:         wave.weight "readout.b" : tensor<8xf32>
// CHECK:         wave.state_write "gru0.h", %[[H2V]] : tensor<32xf32>
// CHECK:         wave.state_write "gru1.h", %{{.*}} : tensor<32xf32>
// CHECK:         wave.output "y", %{{.*}} : tensor<8xf32>
// CHECK-NEXT:    func.return

// The printed IR parses back: it is input for wavec-opt.
// ROUNDTRIP-LABEL: func.func @gru_stack_tiny()
// ROUNDTRIP:         wave.output "y"
