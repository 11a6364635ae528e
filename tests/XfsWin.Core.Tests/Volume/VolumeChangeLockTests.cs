using XfsWin.Volume;
using Xunit;

namespace XfsWin.Tests.Volume;

/// <summary>
/// The volume's change lock on its own: changes exclude reads and each other, reads run together, reads nest inside
/// reads and inside the thread's own change, a change nests inside itself, a read cannot start a change, a change that
/// waits for a read is not overtaken by later reads, and readers waiting for a change are counted.
/// </summary>
public sealed class VolumeChangeLockTests
{
    // Bounds a hang (a lock that is never granted), not a duration.
    private static readonly TimeSpan HangLimit = TimeSpan.FromMinutes(1);

    /// <summary>
    /// Threads doing random reads (some nested, some several processors' worth at once) and changes (some nested,
    /// some reading inside) check on every step that no change overlaps anything: the changes' own counter of work
    /// done without a lock ends equal to the number of changes, and no step ever saw a change beside another holder.
    /// The interleaving varies from run to run; what is checked holds for every interleaving.
    /// </summary>
    [Fact]
    public async Task Changes_exclude_reads_and_each_other_and_reads_share_under_random_nesting()
    {
        var gate = new VolumeChangeLock();
        int readersIn = 0, changesIn = 0, violations = 0;
        long unlockedCounter = 0, changes = 0;
        const int threads = 6, steps = 20_000;
        var workers = Enumerable.Range(0, threads).Select(t => Task.Factory.StartNew(() =>
        {
            var random = new Random(7 + t);
            for (int i = 0; i < steps; i++)
            {
                if (random.Next(10) == 0)
                {
                    using (gate.Change())
                    {
                        if (Interlocked.Increment(ref changesIn) != 1 || Volatile.Read(ref readersIn) != 0) Interlocked.Increment(ref violations);
                        if (random.Next(3) == 0)
                        {
                            using (gate.Change()) { unlockedCounter++; } // re-entered
                        }
                        else
                        {
                            unlockedCounter++;
                        }
                        if (random.Next(2) == 0)
                        {
                            gate.EnterRead(); // a read inside the change
                            if (Volatile.Read(ref changesIn) != 1) Interlocked.Increment(ref violations);
                            gate.ExitRead();
                        }
                        changes++;
                        Interlocked.Decrement(ref changesIn);
                    }
                }
                else
                {
                    gate.EnterRead();
                    Interlocked.Increment(ref readersIn);
                    if (Volatile.Read(ref changesIn) != 0) Interlocked.Increment(ref violations);
                    if (random.Next(4) == 0)
                    {
                        gate.EnterRead(); // nested
                        if (Volatile.Read(ref changesIn) != 0) Interlocked.Increment(ref violations);
                        gate.ExitRead();
                    }
                    if (random.Next(50) == 0) Thread.Yield();
                    Interlocked.Decrement(ref readersIn);
                    gate.ExitRead();
                }
            }
        }, TaskCreationOptions.LongRunning)).ToArray();
        await Task.WhenAll(workers).WaitAsync(HangLimit);
        Assert.Equal(0, violations);
        Assert.Equal(changes, unlockedCounter);
        Assert.True(changes > 0);
    }

    [Fact]
    public void A_read_cannot_start_a_change_and_the_read_still_holds_afterwards() => OnOwnThread(() =>
    {
        var gate = new VolumeChangeLock();
        gate.EnterRead();
        Assert.Throws<LockRecursionException>(() => gate.Change());
        // The read is still held: a change on another thread announces itself and waits for it.
        bool changeIn = false;
        var change = Start(() => { using (gate.Change()) Volatile.Write(ref changeIn, true); });
        Assert.True(SpinWait.SpinUntil(() => gate.ChangeAnnounced, HangLimit));
        Assert.False(Volatile.Read(ref changeIn));
        gate.ExitRead();
        Assert.True(change.Join(HangLimit));
        Assert.True(changeIn);
    });

    /// <summary>
    /// A change waiting for a read holds back reads that come after it, but not a read nested in the one it waits for
    /// (which would otherwise never end); the later read is counted as waiting, and goes in once the change is done.
    /// </summary>
    [Fact]
    public void A_waiting_change_holds_back_new_reads_but_not_a_nested_one() => OnOwnThread(() =>
    {
        var gate = new VolumeChangeLock();
        gate.EnterRead();
        using var changeIn = new ManualResetEventSlim();
        using var changeRelease = new ManualResetEventSlim();
        var change = Start(() =>
        {
            using (gate.Change())
            {
                changeIn.Set();
                changeRelease.Wait(HangLimit);
            }
        });
        Assert.True(SpinWait.SpinUntil(() => gate.ChangeAnnounced, HangLimit));
        bool laterReadIn = false;
        var later = Start(() =>
        {
            gate.EnterRead();
            Volatile.Write(ref laterReadIn, true);
            gate.ExitRead();
        });
        Assert.True(SpinWait.SpinUntil(() => gate.ReadersWaiting == 1, HangLimit), "the later read did not wait behind the announced change");
        Assert.False(Volatile.Read(ref laterReadIn));
        gate.EnterRead(); // nested in the held read: granted at once
        gate.ExitRead();
        Assert.False(changeIn.IsSet);
        gate.ExitRead();
        Assert.True(changeIn.Wait(HangLimit));
        Assert.False(Volatile.Read(ref laterReadIn)); // still behind the change
        changeRelease.Set();
        Assert.True(change.Join(HangLimit) && later.Join(HangLimit));
        Assert.True(laterReadIn);
        Assert.Equal(0, gate.ReadersWaiting);
    });

    [Fact]
    public void Leaving_a_read_never_entered_is_refused_and_a_read_inside_a_change_counts_nothing() => OnOwnThread(() =>
    {
        var gate = new VolumeChangeLock();
        Assert.Throws<SynchronizationLockException>(gate.ExitRead);
        using (gate.Change())
        {
            gate.EnterRead();
            gate.ExitRead();
        }
        // Nothing was left counted: a change on another thread goes in at once.
        var change = Start(() => { using (gate.Change()) { } });
        Assert.True(change.Join(HangLimit));
    });

    private static Thread Start(Action action)
    {
        var thread = new Thread(() => action()) { IsBackground = true };
        thread.Start();
        return thread;
    }

    /// <summary>Runs a test whose shared holds are this thread's own on a thread of its own, failing it when it hangs.</summary>
    private static void OnOwnThread(Action test)
    {
        Exception? failure = null;
        var thread = Start(() =>
        {
            try { test(); }
            catch (Exception e) { failure = e; }
        });
        Assert.True(thread.Join(HangLimit), "the test hung");
        if (failure is not null) throw new Xunit.Sdk.XunitException(failure.ToString());
    }
}
