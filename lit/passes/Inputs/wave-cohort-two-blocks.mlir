func.func @two_blocks() {
  %x = wave.input "x" : tensor<4xf32>
  %y = wave.ewise "mul(%0, 2.0)"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  wave.output "y", %y : tensor<4xf32>
  cf.br ^bb1
^bb1:
  func.return
}
