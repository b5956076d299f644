// What makes two streams' global batches the same bytes: the key under
// which streams share their fills (server/fill_share.h). A global batch
// depends on the workload, its files, split, options, seed and global
// batch size, never on the world size, the stream's name, its start or
// its slots; and it was read with its owner's permissions, which another
// owner's stream may not have. So the key holds:
//   - the workload, split, seed, global batch size and every option, as
//     the spec spells them (two spellings of one option do not share);
//   - the data path by identity, not by name: device, inode, size, mtime
//     and ctime of the directory or file it resolved to (two paths to one
//     data set share; a data set replaced or changed at its top between
//     two opens does not), and the examples the workload found there;
//   - the tensors of an item (name, dtype, shape);
//   - the owner and the credentials its files were read with (uid, gid,
//     supplementary groups; anonymous TCP callers are one owner): streams
//     of two owners never share (docs/security.md says why).
//
// Thread safety: functions of their arguments (DataIdentity reads the
// file system).
#ifndef BATCHD_SERVER_SHARE_KEY_H_
#define BATCHD_SERVER_SHARE_KEY_H_

#include <memory>
#include <string>

#include "batchd/v1/batchd.pb.h"
#include "server/caller.h"
#include "server/engine.h"
#include "server/fill_share.h"
#include "storage/data_file.h"

namespace batchd {

// "dev=.. ino=.. size=.. mtime_ns=.. ctime_ns=.." of `resolved_path` (a
// path confined to the data root, links resolved), reached from `root` with
// its reader's rights, never stat(2) by name as the daemon: the path's
// owner may have swapped a link into it since it was resolved, and what
// the daemon alone may reach must not decide whether two of its streams
// share (status shows it); "" for no path; a string no other call returns
// when it cannot be reached, so that such a stream shares with none.
std::string DataIdentity(const DataRoot& root,
                         const std::string& resolved_path);

// The key of `spec`'s stream, opened by `owner`, as made in `setup` (its
// data_identity, sampler and layout).
std::string ShareKeyOf(const v1::StreamSpec& spec, const Caller& owner,
                       const StreamSetup& setup);

// The stream's member of its group in `share` (FillShare::Join with its
// key and the bytes of each tensor of an item); null when it shares none.
std::shared_ptr<ShareMember> JoinShare(FillShare& share,
                                       const v1::StreamSpec& spec,
                                       const Caller& owner,
                                       const StreamSetup& setup);

}  // namespace batchd

#endif  // BATCHD_SERVER_SHARE_KEY_H_
