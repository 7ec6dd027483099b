// The concrete codecs behind make_codec; private to the encoders.
#pragma once

#include <memory>

#include "encoders/codec.hpp"

namespace skt::enc {

void check_shape(Scheme scheme, int group_size, int parity);
std::unique_ptr<Codec> make_xor_codec(int group_size, bool reference);
std::unique_ptr<Codec> make_sum_codec(int group_size, bool reference);
std::unique_ptr<Codec> make_rs_codec(int group_size, int parity, bool reference);

}  // namespace skt::enc
