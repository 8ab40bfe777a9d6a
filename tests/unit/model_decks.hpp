// Decks shared by the unit tests of the sequence and residual layers.
#pragma once

namespace pt::test {

// A small ResNet chain: stem conv + batch norm, an identity and a projection residual
// block, global average pooling and a classifier; input [3, 8, 8], 5 classes.
inline const char* kResNetDeck =
    "[data]\nsource = \"synthetic\"\nshape = [3, 8, 8]\nclasses = 5\n[model]\n"
    "[[model.layers]]\ntype = \"conv2d\"\nchannels = 4\nkernel = 3\npadding = 1\nbias = false\n"
    "[[model.layers]]\ntype = \"batchnorm2d\"\n"
    "[[model.layers]]\ntype = \"relu\"\n"
    "[[model.layers]]\ntype = \"residual_block\"\nchannels = 4\n"
    "[[model.layers]]\ntype = \"residual_block\"\nchannels = 6\nstride = 2\n"
    "[[model.layers]]\ntype = \"global_avgpool\"\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 5\n"
    "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";

}  // namespace pt::test
