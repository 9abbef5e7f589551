// Small UTF-8 helpers shared by the tokenizers and the streaming detokenizer. Tokenizers work on
// bytes, but several of their rules are stated per character (split into characters, hold back
// half a character), so the byte <-> character bookkeeping lives here once.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace journey::utf8 {

// Length of the sequence that starts with lead byte `b` (1..4), or 0 when `b` cannot start one
// (a continuation byte 10xxxxxx or an invalid lead 0xF8..0xFF).
int sequence_length(unsigned char b);

// Length of the valid UTF-8 character at text[pos], or 0 if the bytes there are not a complete
// valid character (truncated, overlong, surrogate, beyond U+10FFFF).
int valid_char_length(std::string_view text, size_t pos);

// True when text[pos..] is the beginning of a valid character that the end of `text` cut short.
bool is_truncated_prefix(std::string_view text, size_t pos);

// Encode one code point.
std::string encode(char32_t code_point);

// The replacement character U+FFFD that stands for bytes that are not UTF-8.
inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

// Every invalid byte becomes U+FFFD; valid characters are kept.
std::string sanitize(std::string_view bytes);

}  // namespace journey::utf8
