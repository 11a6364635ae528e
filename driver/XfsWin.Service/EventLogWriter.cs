using System.Diagnostics;
using System.Runtime.Versioning;

namespace XfsWin.Service;

/// <summary>Writes to the Windows Application log under the "XfsWin" source (created by register).</summary>
[SupportedOSPlatform("windows")]
internal static class EventLogWriter
{
    public const string Source = "XfsWin";

    public static void EnsureSource()
    {
        if (!EventLog.SourceExists(Source)) EventLog.CreateEventSource(Source, "Application");
    }

    public static void Info(int id, string message) => Write(EventLogEntryType.Information, id, message);
    public static void Warning(int id, string message) => Write(EventLogEntryType.Warning, id, message);
    public static void Error(int id, string message) => Write(EventLogEntryType.Error, id, message);

    private static void Write(EventLogEntryType type, int id, string message)
    {
        try
        {
            EventLog.WriteEntry(Source, message, type, id);
        }
        catch (Exception e) when (e is InvalidOperationException or System.Security.SecurityException or System.ComponentModel.Win32Exception)
        {
            // No event source yet (service never registered): the console is all we have.
            Console.Error.WriteLine($"[{type}] {message}");
        }
    }
}
