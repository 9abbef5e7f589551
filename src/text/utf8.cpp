#include "text/utf8.h"

namespace journey::utf8 {

int sequence_length(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 0;
}

// The second byte of a sequence has a narrower range for some leads (RFC 3629 table): that is
// what rules out overlong forms, surrogates and code points above U+10FFFF.
static bool second_byte_ok(unsigned char lead, unsigned char b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return (b & 0xC0) == 0x80;
}

static bool lead_ok(unsigned char lead) {
  return lead < 0x80 || (lead >= 0xC2 && lead <= 0xF4);
}

int valid_char_length(std::string_view text, size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  if (!lead_ok(lead)) return 0;
  const int n = sequence_length(lead);
  if (pos + n > text.size()) return 0;
  for (int i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(text[pos + i]);
    if (i == 1 ? !second_byte_ok(lead, b) : (b & 0xC0) != 0x80) return 0;
  }
  return n;
}

bool is_truncated_prefix(std::string_view text, size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  if (!lead_ok(lead)) return false;
  const size_t n = sequence_length(lead);
  if (pos + n <= text.size()) return false;  // long enough: it is either complete or invalid
  for (size_t i = pos + 1; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (i == pos + 1 ? !second_byte_ok(lead, b) : (b & 0xC0) != 0x80) return false;
  }
  return true;
}

std::string encode(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

std::string sanitize(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    const int n = valid_char_length(bytes, pos);
    if (n == 0) {
      out += kReplacement;
      ++pos;
    } else {
      out.append(bytes.substr(pos, n));
      pos += n;
    }
  }
  return out;
}

}  // namespace journey::utf8
