#include "core/suggest.h"

#include <gtest/gtest.h>

namespace moecomm::core {
namespace {

TEST(Suggest, EditDistanceCountsInsertionsDeletionsSubstitutionsAndSwaps) {
  EXPECT_EQ(edit_distance("chunks", "chunks"), 0);
  EXPECT_EQ(edit_distance("chunk", "chunks"), 1);    // insertion
  EXPECT_EQ(edit_distance("chunkss", "chunks"), 1);  // deletion
  EXPECT_EQ(edit_distance("chunkz", "chunks"), 1);   // substitution
  EXPECT_EQ(edit_distance("chukns", "chunks"), 1);   // adjacent swap
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
}

TEST(Suggest, NearNamesWithinAThirdOfTheTypedLength) {
  const std::vector<std::string> knobs = {"chunks", "chunks_fwd", "chunks_bwd", "grad_sync"};
  EXPECT_EQ(near_names("chunk", knobs), (std::vector<std::string>{"chunks"}));
  EXPECT_EQ(near_names("chunks_fw", knobs), (std::vector<std::string>{"chunks_fwd"}));
  EXPECT_EQ(near_names("grad-sync", knobs), (std::vector<std::string>{"grad_sync"}));
  EXPECT_TRUE(near_names("chunks", knobs).empty());  // a name itself needs no suggestion
  EXPECT_TRUE(near_names("pipeline", knobs).empty());
  // Equally near names are all offered, up to three.
  EXPECT_EQ(near_names("chunks_xwd", knobs),
            (std::vector<std::string>{"chunks_fwd", "chunks_bwd"}));
  EXPECT_TRUE(near_names("xp", {"dp", "tp", "ep", "pp", "cp"}).empty());
}

TEST(Suggest, DidYouMeanPhrasesTheNearNames) {
  EXPECT_EQ(did_you_mean("chunk", {"chunks", "grad_sync"}), "; did you mean 'chunks'?");
  EXPECT_EQ(did_you_mean("chunks_xwd", {"chunks_fwd", "chunks_bwd"}),
            "; did you mean 'chunks_fwd' or 'chunks_bwd'?");
  EXPECT_EQ(did_you_mean("xp", {"dp", "ep", "tp"}), "; did you mean 'dp', 'ep' or 'tp'?");
  EXPECT_EQ(did_you_mean("zzz", {"dp", "ep"}), "");
}

}  // namespace
}  // namespace moecomm::core
