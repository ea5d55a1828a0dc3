// RUN: wavec import transformer:tiny | filecheck %s

// The streaming transformer's first layer (wavec/zoo/transformer.py): the beat index is a state counting
// up; RoPE computes cos/sin(beat * inv_freq) in the ewise; the KV ring write is a select on the slot
// (beat mod capacity); attention masks the slots not yet populated (slot > beat) before its softmax.

// CHECK-LABEL: func.func @transformer_tiny()
// CHECK:         %[[BEAT:.*]] = wave.state "beat" : tensor<1xf32>
// CHECK:         %[[NEXT:.*]] = wave.ewise "add(%0, 1.0)"(%[[BEAT]]) : (tensor<1xf32>) -> tensor<1xf32>
// CHECK:         %[[K:.*]] = wave.state "layer0.kv.k" : tensor<8x2x8xf32>
// CHECK:         %[[V:.*]] = wave.state "layer0.kv.v" : tensor<8x2x8xf32>
// CHECK:         %[[FREQ:.*]] = wave.weight "const.rope8_base10000" : tensor<4xf32>
// CHECK:         wave.ewise "sub(mul(%0, cos(mul(%2, %3))), mul(%1, sin(mul(%2, %3))))"(%{{.*}}, %{{.*}}, %[[BEAT]], %[[FREQ]]) : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<1xf32>, tensor<4xf32>) -> tensor<4x4xf32>
// CHECK:         %[[SLOT:.*]] = wave.weight "const.iota8x1x1" : tensor<8x1x1xf32>
// CHECK:         %[[K2:.*]] = wave.ewise "select(eq(%0, fmod(%1, 8.0)), %2, %3)"(%[[SLOT]], %[[BEAT]], %{{.*}}, %[[K]]) : (tensor<8x1x1xf32>, tensor<1xf32>, tensor<2x8xf32>, tensor<8x2x8xf32>) -> tensor<8x2x8xf32>
// CHECK:         %[[V2:.*]] = wave.ewise "select(eq(%0, fmod(%1, 8.0)), %2, %3)"(%[[SLOT]], %[[BEAT]], %{{.*}}, %[[V]])
// Grouped-query attention: 4 query heads as [2 kv heads, 2, 8] against K^T [2, 8, 8 slots].
// CHECK:         %[[KT:.*]] = wave.transpose %[[K2]] {perm = array<i64: 1, 2, 0>} : (tensor<8x2x8xf32>) -> tensor<2x8x8xf32>
// CHECK:         %[[S:.*]] = wave.matmul %{{.*}}, %[[KT]] : (tensor<2x2x8xf32>, tensor<2x8x8xf32>) -> tensor<2x2x8xf32>
// CHECK:         %[[IOTA:.*]] = wave.weight "const.iota8" : tensor<8xf32>
// CHECK:         %[[M:.*]] = wave.ewise "select(le(%1, %2), mul(%0, 0.3535533845424652), -1.0000000150474662e+30)"(%[[S]], %[[IOTA]], %[[BEAT]])
// CHECK:         wave.reduce "max" %[[M]] {axes = array<i64: 2>, keepdims = true}
// CHECK:         wave.reduce "sum"
// CHECK:         %[[VT:.*]] = wave.transpose %[[V2]] {perm = array<i64: 1, 0, 2>}
// CHECK:         wave.matmul %{{.*}}, %[[VT]] : (tensor<2x2x8xf32>, tensor<2x8x8xf32>) -> tensor<2x2x8xf32>
// CHECK:         wave.state_write "beat", %[[NEXT]] : tensor<1xf32>
// CHECK:         wave.state_write "layer0.kv.k", %[[K2]] : tensor<8x2x8xf32>
// CHECK:         wave.output "logits", %{{.*}} : tensor<40xf32>
