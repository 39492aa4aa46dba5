// The allocation timeline (allocation_timeline.hpp): the reader's records and its errors (each naming the line
// and the column of the field at fault); the layout's offsets (a block sits on the older live blocks and falls
// when one is freed), its choice of blocks and its call-site summaries; the report's section: present only with
// a timeline, one path per drawn block with its stack as a <title>, escaped, and the same bytes for the same
// input.
#include <gpumem/report/allocation_timeline.hpp>
#include <gpumem/report/html_report.hpp>

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpumem::test {
namespace {

using offsets = std::vector<std::pair<std::size_t, std::size_t>>;

constexpr std::string_view example =
  "gpumem-timeline 1\n"
  "# a comment, then a blank line\n"
  "\n"
  "site\t0\t12\ttrain_step\t/home/me/train.py\n"
  "stack\t0\t0\n"
  "frame\t40\tempty\t/x/torch/functional.py\n"
  "frame\t12\ttrain_step\t/home/me/train.py\n"
  "stack\t1\t-1\n"
  "alloc\t100\t0x1000\t400\t0\n"    // a
  "alloc\t101\t0x2000\t100\t1\n"    // b
  "alloc\t102\t0x3000\t50\t-1\n"    // c
  "free\t103\t0x1000\n"             // a freed: b and c fall by 400
  "free\t104\t0x2000\n"             // b freed: c falls by 100
  "alloc\t105\t0x1000\t10\t0\n";    // d: on top of c

std::string error_of(std::string_view text)
{
  try {
    (void)parse_allocation_timeline(text, "t.timeline");
  } catch (timeline_format_error const& e) {
    return e.what();
  }
  return "no error";
}

TEST(allocation_timeline, reads_every_record)
{
  allocation_timeline const t = parse_allocation_timeline(example, "t.timeline");
  ASSERT_EQ(t.sites.size(), 1U);
  EXPECT_EQ(t.sites[0], (timeline_frame{"/home/me/train.py", 12, "train_step"}));
  ASSERT_EQ(t.stacks.size(), 2U);
  EXPECT_EQ(t.stacks[0].site, 0);
  ASSERT_EQ(t.stacks[0].frames.size(), 2U);
  EXPECT_EQ(t.stacks[0].frames[0], (timeline_frame{"/x/torch/functional.py", 40, "empty"}));
  EXPECT_EQ(t.stacks[1].site, -1);
  EXPECT_TRUE(t.stacks[1].frames.empty());
  ASSERT_EQ(t.events.size(), 6U);
  EXPECT_EQ(t.events[0].what, timeline_event::kind::alloc);
  EXPECT_EQ(t.events[0].time_us, 100);
  EXPECT_EQ(t.events[0].address, 0x1000U);
  EXPECT_EQ(t.events[0].size, 400U);
  EXPECT_EQ(t.events[2].stack, -1);
  EXPECT_EQ(t.events[3].what, timeline_event::kind::free);
}

TEST(allocation_timeline, names_line_and_column_of_each_problem)
{
  std::string const h = "gpumem-timeline 1\n";
  EXPECT_EQ(error_of(""), "t.timeline:1:1: empty file: expected the header 'gpumem-timeline 1'");
  EXPECT_EQ(error_of("gpumem-timeline 2\n"), "t.timeline:1:1: expected the header 'gpumem-timeline 1'");
  EXPECT_EQ(error_of(h + "malloc\t1\n"),
            "t.timeline:2:1: unknown record 'malloc' (expected site, stack, frame, alloc or free)");
  EXPECT_EQ(error_of(h + "alloc\t1\t0x10\tbig\t-1\n"), "t.timeline:2:14: size must be an integer, not 'big'");
  EXPECT_EQ(error_of(h + "alloc\t1\t16\t8\t-1\n"), "t.timeline:2:9: address must be hexadecimal with 0x, not '16'");
  EXPECT_EQ(error_of(h + "alloc\t1\t0x10\t8\n"), "t.timeline:2:15: missing field: stack");
  EXPECT_EQ(error_of(h + "alloc\t1\t0x10\t8\t0\n"),
            "t.timeline:2:16: stack 0 is not defined (0 defined so far; -1 for none)");
  EXPECT_EQ(error_of(h + "alloc\t1\t0x10\t8\t-1\textra\n"), "t.timeline:2:19: unexpected field after the last one");
  EXPECT_EQ(error_of(h + "free\t1\t0x10\n"), "t.timeline:2:8: free of an address that is not live");
  EXPECT_EQ(error_of(h + "stack\t1\t-1\n"), "t.timeline:2:7: id 1 out of order: expected 0");
  EXPECT_EQ(error_of(h + "frame\t1\tf\tx.py\n"), "t.timeline:2:1: a frame before any stack record");
  EXPECT_EQ(error_of(h + "site\t0\tx\tf\tx.py\n"), "t.timeline:2:8: line must be an integer, not 'x'");
  EXPECT_EQ(error_of(h + "alloc\t1\t0x10\t99999999999999999999999\t-1\n"),
            "t.timeline:2:14: size must be an integer in range, not '99999999999999999999999'");
}

TEST(allocation_timeline, read_names_a_missing_file)
{
  EXPECT_THROW((void)read_allocation_timeline("/nonexistent/t.timeline"), logic_error);
}

TEST(allocation_timeline, layout_stacks_blocks_on_the_older_live_ones)
{
  timeline_layout const l = layout_allocation_timeline(parse_allocation_timeline(example, "t"), 10);
  EXPECT_EQ(l.events, 6U);
  EXPECT_EQ(l.live_bytes, (std::vector<std::size_t>{400, 500, 550, 150, 50, 60}));
  EXPECT_EQ(l.peak_bytes, 550U);
  ASSERT_EQ(l.blocks.size(), 4U);
  EXPECT_EQ(l.blocks[0].offsets, (offsets{{0, 0}}));
  EXPECT_EQ(l.blocks[0].end, 3U);
  EXPECT_TRUE(l.blocks[0].freed);
  EXPECT_EQ(l.blocks[1].offsets, (offsets{{1, 400}, {3, 0}}));
  EXPECT_EQ(l.blocks[2].offsets, (offsets{{2, 500}, {3, 100}, {4, 0}}));
  EXPECT_FALSE(l.blocks[2].freed);
  EXPECT_EQ(l.blocks[2].end, 6U);
  EXPECT_EQ(l.blocks[3].offsets, (offsets{{5, 50}}));
  // Call sites by peak: site 0 (a, then d: 400 at most), none (b and c: 150 at once).
  ASSERT_EQ(l.sites.size(), 2U);
  EXPECT_EQ(l.sites[0].site, 0);
  EXPECT_EQ(l.sites[0].peak_bytes, 400U);
  EXPECT_EQ(l.sites[0].allocations, 2U);
  EXPECT_EQ(l.sites[1].site, -1);
  EXPECT_EQ(l.sites[1].peak_bytes, 150U);
}

TEST(allocation_timeline, layout_keeps_the_largest_blocks_by_size_times_lifetime)
{
  // a: 400 × 3 events = 1200, b: 100 × 2 = 200, c: 50 × 4 = 200, d: 10 × 1 = 10.
  timeline_layout const l = layout_allocation_timeline(parse_allocation_timeline(example, "t"), 2);
  EXPECT_EQ(l.blocks_total, 4U);
  ASSERT_EQ(l.blocks.size(), 2U);
  EXPECT_EQ(l.blocks[0].alloc_event, 0U);
  EXPECT_EQ(l.blocks[1].alloc_event, 1U);  // ties go to the earlier
  EXPECT_EQ(l.live_bytes.back(), 60U);     // every block counts in the live bytes
}

TEST(allocation_timeline, an_alloc_at_a_live_address_replaces_the_older_block)
{
  timeline_layout const l = layout_allocation_timeline(
    parse_allocation_timeline("gpumem-timeline 1\nalloc\t0\t0x10\t8\t-1\nalloc\t1\t0x20\t4\t-1\n"
                              "alloc\t2\t0x10\t2\t-1\nfree\t3\t0x10\n", "t"), 10);
  EXPECT_EQ(l.live_bytes, (std::vector<std::size_t>{8, 12, 6, 4}));
  EXPECT_EQ(l.blocks[0].end, 2U);
  EXPECT_EQ(l.blocks[1].offsets, (offsets{{1, 8}, {2, 0}}));
  EXPECT_EQ(l.blocks[2].offsets, (offsets{{2, 4}}));
}

report_input input_with(std::string_view timeline)
{
  report_input input;
  input.title = "t";
  input.timeline = parse_allocation_timeline(timeline, "t");
  return input;
}

TEST(allocation_timeline, report_section_draws_blocks_with_their_stacks)
{
  std::string const page = render_html_report(input_with(example));
  EXPECT_NE(page.find("<h2 id=\"allocation-timeline\">Allocation timeline</h2>"), std::string::npos);
  EXPECT_NE(page.find("<svg id=\"chart-timeline\""), std::string::npos);
  std::size_t blocks = 0;
  for (std::size_t at = page.find("<path data-block="); at != std::string::npos;
       at = page.find("<path data-block=", at + 1)) {
    ++blocks;
  }
  EXPECT_EQ(blocks, 4U);
  EXPECT_NE(page.find("<path data-series=\"other\""), std::string::npos);
  EXPECT_NE(page.find("data-block=\"0\" data-site=\"0\""), std::string::npos);
  EXPECT_NE(page.find("data-block=\"2\" data-site=\"-1\""), std::string::npos);
  EXPECT_NE(page.find("call site: train_step (/home/me/train.py:12)\n  empty (/x/torch/functional.py:40)\n"
                      "  train_step (/home/me/train.py:12)</title>"),
            std::string::npos);
  EXPECT_NE(page.find("<tr data-site=\"0\">"), std::string::npos);
  EXPECT_LT(page.find("<tr data-site=\"0\">"), page.find("<tr data-site=\"-1\">"));  // by peak
  EXPECT_EQ(page.find("nan"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page, render_html_report(input_with(example)));  // deterministic
}

TEST(allocation_timeline, report_section_escapes_names_and_is_absent_without_a_timeline)
{
  std::string const page = render_html_report(input_with(
    "gpumem-timeline 1\nsite\t0\t1\t<script>\t/a&b.py\nstack\t0\t0\nframe\t1\t<script>\t/a&b.py\n"
    "alloc\t0\t0x10\t8\t0\n"));
  EXPECT_EQ(page.find("<script>"), std::string::npos);
  EXPECT_NE(page.find("&lt;script&gt; (/a&amp;b.py:1)"), std::string::npos);

  report_input without;
  EXPECT_EQ(render_html_report(without).find("allocation-timeline"), std::string::npos);
  std::string const empty = render_html_report(input_with("gpumem-timeline 1\n"));
  EXPECT_NE(empty.find("class=\"no-data\""), std::string::npos);
  EXPECT_NE(empty.find("No allocation in the timeline."), std::string::npos);
}

}  // namespace
}  // namespace gpumem::test
