using XfsWin.Inodes;
using XfsWin.Tests.Allocation;
using XfsWin.Volume;
using Xunit;

namespace XfsWin.Tests.Volume;

/// <summary>
/// The working state of writes that allocate is with one write at a time: a scratch or an editor a write has taken is
/// handed to no other write until it is given back, and an editor given back with its file's mapping kept is what the
/// file's next write takes up. On a volume mkfs.xfs made and the kernel filled (/punched, of 2,500 extents in a bmbt, and /f1, of one extent).
/// </summary>
public sealed class WriteScratchPoolTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-scratch.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    [Fact]
    public void What_a_write_took_goes_to_no_other_write_until_it_is_given_back()
    {
        string img = AllocatorImages.Copy("small-6.13", _tmp);
        ulong punched, small;
        var others = new List<ulong>();
        using (var ro = XfsVolume.Open(img))
        {
            punched = ro.ResolvePath("/punched");
            small = ro.ResolvePath("/f1");
            // Files that survived the fragmentation (odd numbers), for writes to many files.
            for (int i = 3; i < 3 + 2 * 2 * WriteScratchPool.KeptEditors; i += 2) others.Add(ro.ResolvePath("/f" + i));
        }
        using var v = new AllocatorVolume(img);
        var sb = v.Sb;
        using var data = new FileDataCache(v.Device, (int)sb.BlockSize);
        var space = new VolumeSpace(v.Allocator, sb, data);
        var inodes = new InodeCache(v.Mount);
        var pool = new WriteScratchPool();
        using (var tx = v.Begin())
        {
            var s1 = pool.TakeScratch();
            var s2 = pool.TakeScratch();
            Assert.NotSame(s1, s2);
            var u1 = s1.InodeFor(inodes.Get(punched), sb);
            var u2 = s2.InodeFor(inodes.Get(punched), sb);
            Assert.NotSame(u1, u2);

            // Two writes to one file at once: two editors.
            var e1 = pool.TakeEditor(tx, u1, space);
            var e2 = pool.TakeEditor(tx, u2, space);
            Assert.NotSame(e1, e2);

            // e1 given back with punched's mapping kept: punched's next write takes it up without loading the fork.
            e1.MarkKept();
            pool.ReturnEditor(e1);
            var e3 = pool.TakeEditor(tx, s1.InodeFor(inodes.Get(punched), sb), space);
            Assert.Same(e1, e3);
            Assert.Equal(1, pool.MappingsKept);

            // While e1 is out again, neither another write to punched nor one to small gets it or e2.
            var e4 = pool.TakeEditor(tx, s2.InodeFor(inodes.Get(punched), sb), space);
            var e5 = pool.TakeEditor(tx, pool.TakeScratch().InodeFor(inodes.Get(small), sb), space);
            Assert.Equal(4, new HashSet<object>([e1, e2, e4, e5]).Count);
            Assert.Equal(1, pool.MappingsKept);

            // While e1 is out, writes to other files, each giving its editor back (the pool's slots fill and the least
            // recently used is taken), then as many writes at once as the pool keeps editors: e1 goes to none of them,
            // and the writes at once get one editor each.
            var scratch = pool.TakeScratch();
            foreach (ulong other in others.Take(WriteScratchPool.KeptEditors))
            {
                var e = pool.TakeEditor(tx, scratch.InodeFor(inodes.Get(other), sb), space);
                Assert.NotSame(e1, e);
                e.MarkKept();
                pool.ReturnEditor(e);
            }
            var atOnce = others.Skip(WriteScratchPool.KeptEditors)
                .Select(other => pool.TakeEditor(tx, pool.TakeScratch().InodeFor(inodes.Get(other), sb), space)).ToList();
            Assert.DoesNotContain(e1, atOnce);
            Assert.Equal(atOnce.Count, atOnce.Distinct().Count());
            foreach (var e in atOnce) pool.ReturnEditor(e);

            // Given back without a kept mapping, an editor is not taken up: punched's next write loads its mapping, and
            // still never gets e1, which is out.
            pool.ReturnEditor(e4);
            var e6 = pool.TakeEditor(tx, s2.InodeFor(inodes.Get(punched), sb), space);
            Assert.Equal(1, pool.MappingsKept);
            Assert.NotSame(e1, e6);

            // A scratch given back is the next one taken.
            pool.ReturnScratch(s1);
            Assert.Same(s1, pool.TakeScratch());
        }
        v.Unmount();
        AllocatorVolume.AssertRepairClean(img);
    }

    [Fact]
    public void An_inode_set_answers_what_changed_and_lists_a_copy_in_ascending_order()
    {
        var set = new InodeSet();
        Assert.True(set.Add(300));
        Assert.True(set.Add(128));
        Assert.False(set.Add(300));
        Assert.True(set.Contains(128));
        var listed = set.Ascending();
        Assert.Equal([128UL, 300UL], listed);
        // The list is the set as it was: a change made while a caller goes through it does not reach it.
        Assert.True(set.Remove(128));
        Assert.False(set.Remove(128));
        Assert.True(set.Add(64));
        Assert.Equal([128UL, 300UL], listed);
        Assert.Equal([64UL, 300UL], set.Ascending());
    }
}
