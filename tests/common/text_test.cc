#include "common/text.h"

#include <string>

#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(TextTest, FindsTheFirstByteThatIsNotUtf8) {
  EXPECT_FALSE(FirstInvalidUtf8("plain ascii").has_value());
  EXPECT_FALSE(FirstInvalidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80").has_value());
  EXPECT_EQ(FirstInvalidUtf8("ab\xff"), 2u);
  EXPECT_EQ(FirstInvalidUtf8("ab\xc3"), 2u) << "a sequence cut short";
  EXPECT_EQ(FirstInvalidUtf8("\xc0\xaf"), 0u) << "an overlong '/'";
  EXPECT_EQ(FirstInvalidUtf8("x\xed\xa0\x80"), 1u) << "a UTF-16 surrogate";
  EXPECT_EQ(FirstInvalidUtf8("\xf4\x90\x80\x80"), 0u) << "above U+10FFFF";
}

TEST(TextTest, ControlCharactersIncludeNewlinesEscapesAndC1) {
  EXPECT_FALSE(HasControlCharacters("fc1.wgrad-2 caf\xc3\xa9"));
  EXPECT_TRUE(HasControlCharacters("a\nb"));
  EXPECT_TRUE(HasControlCharacters("\x1b[2J"));
  EXPECT_TRUE(HasControlCharacters("del\x7f"));
  EXPECT_TRUE(HasControlCharacters("c1 \xc2\x9b"));  // U+009B, a terminal's CSI
}

// Invisible characters that reorder or hide what a terminal shows.
TEST(TextTest, FormatCharactersCountAsControls) {
  EXPECT_TRUE(HasControlCharacters("job \xe2\x80\xae" "1-boj"));  // U+202E right-to-left override
  EXPECT_TRUE(HasControlCharacters("zero\xe2\x80\x8bwidth"));   // U+200B zero-width space
  EXPECT_TRUE(HasControlCharacters("\xef\xbb\xbf" "bom"));         // U+FEFF
  EXPECT_TRUE(HasControlCharacters("line\xe2\x80\xa8sep"));     // U+2028
  EXPECT_TRUE(HasControlCharacters("tag\xf3\xa0\x80\x81"));     // U+E0001 language tag
  EXPECT_FALSE(HasControlCharacters("\xe2\x80\x94 dash \xe2\x80\x99"));  // U+2014, U+2019
  EXPECT_EQ(Excerpt("a\xe2\x80\xae" "b"), "a\\u202eb");
}

// Characters that show as nothing or as a blank, and those whose glyph is a
// private matter: two names differing by one look alike, or like none.
TEST(TextTest, InvisibleFillersNoncharactersAndPrivateUseCountAsControls) {
  EXPECT_TRUE(HasControlCharacters("\xe3\x85\xa4"));       // U+3164 HANGUL FILLER
  EXPECT_TRUE(HasControlCharacters("a\xe1\x85\x9f"));      // U+115F
  EXPECT_TRUE(HasControlCharacters("a\xe1\x85\xa0"));      // U+1160
  EXPECT_TRUE(HasControlCharacters("a\xef\xbe\xa0"));      // U+FFA0 halfwidth filler
  EXPECT_TRUE(HasControlCharacters("\xe2\xa0\x80"));       // U+2800 braille blank
  EXPECT_TRUE(HasControlCharacters("a\xcd\x8f"));          // U+034F combining grapheme joiner
  EXPECT_TRUE(HasControlCharacters("x\xef\xbf\xbe"));      // U+FFFE
  EXPECT_TRUE(HasControlCharacters("x\xef\xbf\xbf"));      // U+FFFF
  EXPECT_TRUE(HasControlCharacters("x\xef\xb7\x90"));      // U+FDD0
  EXPECT_TRUE(HasControlCharacters("x\xf0\x9f\xbf\xbf"));  // U+1FFFF
  EXPECT_TRUE(HasControlCharacters("x\xee\x80\x80"));      // U+E000 private use
  EXPECT_TRUE(HasControlCharacters("x\xef\xa3\xbf"));      // U+F8FF private use
  EXPECT_TRUE(HasControlCharacters("x\xf3\xb0\x80\x80"));  // U+F0000 plane 15
  EXPECT_TRUE(HasControlCharacters("x\xf4\x80\x80\x80"));  // U+100000 plane 16
  // Letters, symbols and emoji beside them stay.
  EXPECT_FALSE(HasControlCharacters("\xea\xb0\x80 \xe7\x81\xab \xf0\x9f\x98\x80 \xef\xbf\xbd"));
  EXPECT_FALSE(HasControlCharacters("\xe2\xa0\x81"));  // U+2801, a braille dot
  EXPECT_EQ(Excerpt("a\xe3\x85\xa4"
                    "b"),
            "a\\u3164b");
  EXPECT_EQ(Excerpt("\xf3\xb0\x80\x80"), "\\uf0000");
}

TEST(TextTest, ExcerptsArePrintableAndBounded) {
  EXPECT_EQ(Excerpt("\x1b]0;t\x07\n\t"), "\\x1b]0;t\\x07\\n\\t");
  EXPECT_EQ(Excerpt("bad \xff byte"), "bad \\xff byte");
  EXPECT_EQ(Excerpt(std::string(1000, 'a'), 10), "aaaaaaaaaa... (1000 bytes in all)");
  // Cut at a character boundary: a 2-byte character that does not fit is left out.
  EXPECT_EQ(Excerpt("abc\xc3\xa9xyz", 4), "abc... (8 bytes in all)");
  EXPECT_EQ(QuotedExcerpt("id"), "\"id\"");
}

}  // namespace
}  // namespace overlap
