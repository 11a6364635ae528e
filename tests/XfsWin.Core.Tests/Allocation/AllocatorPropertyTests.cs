using CsCheck;
using Xunit;
using XfsWin.Allocation;

namespace XfsWin.Tests.Allocation;

/// <summary>
/// Allocate and free against a model, on a real volume: the model is the set of extents the test holds. After every
/// transaction both free-space trees of every AG hold the same extents (structure checked), the AGF and the allocator
/// count them, no held extent overlaps another or any free extent, and the volume's free block count is what it
/// started with less what is held. Sequences come from CsCheck generators on fixed PCG streams (deterministic; a
/// failure names its stream).
/// </summary>
public sealed class AllocatorPropertyTests : IDisposable
{
    private readonly string _tmp = Directory.CreateTempSubdirectory("xfswin-allocprop.").FullName;

    public void Dispose() => Directory.Delete(_tmp, recursive: true);

    private readonly record struct Step(int Action, int Where, int Size, int Pick);

    private const ulong Seed = 0xA110_CA70_0001UL;

    private static readonly Gen<Step[]> Steps =
        Gen.Select(Gen.Int[0, 99], Gen.Int[0, 1 << 20], Gen.Int[1, 40], Gen.Int[0, 1 << 20], (a, w, s, p) => new Step(a, w, s, p)).Array[120, 160];

    [Theory]
    [InlineData("small-6.13", 1u)]
    [InlineData("small-6.1", 2u)]
    public void Allocations_and_frees_keep_both_trees_and_the_counters_equal_to_the_model(string kind, uint stream)
    {
        var steps = Steps.Generate(new PCG(stream, Seed), null!, out _);
        string img = AllocatorImages.Copy(kind, _tmp, fragment: false);
        using var v = new AllocatorVolume(img);
        var sb = v.Sb;
        long initial = v.Allocator.FreeBlocks;
        var held = new List<AllocatorKernelTests.Held>();
        ulong offset = 0;
        for (int n = 0; n < steps.Length; n++)
        {
            var st = steps[n];
            using (var tx = v.Begin())
            {
                if (st.Action < 35 && held.Count > 0)
                {
                    var h = held[st.Pick % held.Count];
                    held.Remove(h);
                    v.Allocator.Free(tx, h.StartBlock, h.Length, h.Owner);
                }
                else
                {
                    uint ag = (uint)(st.Where % sb.AgCount);
                    uint agbno = (uint)(st.Where % (sb.AgBlocks - 32)) + 16;
                    var owner = RmapOwner.InodeData(900 + (ulong)(st.Pick % 4), offset += 100);
                    var got = v.Allocator.TryAllocate(tx, new AllocationRequest
                    {
                        Target = ((ulong)ag << sb.AgBlkLog) | agbno,
                        MinLength = 1, MaxLength = (uint)st.Size,
                        Mode = (st.Action % 3) switch { 0 => AllocationMode.Near, 1 => AllocationMode.BySize, _ => AllocationMode.Exact },
                        Owner = owner,
                    });
                    if (got is { } e) held.Add(new(e.StartBlock, e.Length, owner));
                }
                tx.Commit();
            }
            try
            {
                v.AssertTreesAgree();
                Assert.Equal(initial - held.Sum(h => (long)h.Length), v.Allocator.FreeBlocks);
                AssertDisjoint(v, held);
            }
            catch (Exception e)
            {
                throw new Xunit.Sdk.XunitException($"stream {stream}, step {n} ({st}): {e.Message}");
            }
        }
        AllocatorKernelTests.FreeAll(v, new Random((int)stream), held);
        v.AssertTreesAgree();
        Assert.Equal(initial, v.Allocator.FreeBlocks);
        v.Unmount();
        v.Dispose();
        AllocatorVolume.AssertRepairClean(img);
    }

    /// <summary>No two held extents overlap, and none overlaps a free extent of the trees.</summary>
    private static void AssertDisjoint(AllocatorVolume v, List<AllocatorKernelTests.Held> held)
    {
        var sb = v.Sb;
        var byAg = held.GroupBy(h => (uint)(h.StartBlock >> sb.AgBlkLog));
        foreach (var g in byAg)
        {
            var used = g.Select(h => (Start: (uint)(h.StartBlock & ((1UL << sb.AgBlkLog) - 1)), h.Length)).OrderBy(x => x.Start).ToList();
            for (int i = 1; i < used.Count; i++)
                Assert.True(used[i - 1].Start + used[i - 1].Length <= used[i].Start, $"AG {g.Key}: held extents {used[i - 1]} and {used[i]} overlap");
            var free = v.FreeSpace(g.Key).ByBlock;
            int j = 0;
            foreach (var (start, length) in used)
            {
                while (j < free.Count && free[j].Start + free[j].Count <= start) j++;
                Assert.True(j >= free.Count || free[j].Start >= start + length, $"AG {g.Key}: held extent {start}+{length} overlaps free extent {free[j]}");
            }
        }
    }
}
