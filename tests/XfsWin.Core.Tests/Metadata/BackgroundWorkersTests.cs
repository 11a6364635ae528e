using XfsWin.Metadata;
using Xunit;

namespace XfsWin.Tests.Metadata;

public sealed class BackgroundWorkersTests
{
    [Fact]
    public void Work_runs_on_dedicated_threads_survives_failures_and_ends_at_close()
    {
        var workers = new BackgroundWorkers("test-workers", 2);
        var ran = 0;
        var onPool = 0;
        var threads = new System.Collections.Concurrent.ConcurrentDictionary<Thread, bool>();
        using var release = new ManualResetEventSlim();
        // Two items block: the third must still run once they finish, and a throwing item must not
        // end its thread or the process.
        for (var i = 0; i < 2; i++)
            Assert.True(workers.TryQueue(() => { threads[Thread.CurrentThread] = true; release.Wait(); Interlocked.Increment(ref ran); }));
        Assert.True(workers.TryQueue(() => throw new InvalidOperationException("advisory work failed")));
        for (var i = 0; i < 50; i++)
            Assert.True(workers.TryQueue(() =>
            {
                threads[Thread.CurrentThread] = true;
                if (Thread.CurrentThread.IsThreadPoolThread) Interlocked.Increment(ref onPool);
                Interlocked.Increment(ref ran);
            }));
        Thread.Sleep(50);
        Assert.Equal(0, Volatile.Read(ref ran));
        release.Set();

        Assert.True(workers.Close(TimeSpan.FromSeconds(10)), "the worker threads did not end");
        Assert.Equal(52, Volatile.Read(ref ran));
        Assert.Equal(0, onPool);
        Assert.InRange(threads.Count, 1, 2);
        Assert.All(threads.Keys, t => Assert.False(t.IsAlive));
        Assert.False(workers.TryQueue(() => Interlocked.Increment(ref ran)), "work was accepted after close");
        Assert.Equal(52, Volatile.Read(ref ran));
    }
}
