namespace XfsWin.Format;

/// <summary>
/// Outcome of a structure verifier: either OK or where and why it failed. Verifiers never throw;
/// the metadata layer turns a failure into an <see cref="XfsCorruptionException"/> naming the
/// structure and its disk address.
/// </summary>
public readonly record struct VerifyResult(string? Problem, int FieldOffset)
{
    public static VerifyResult Ok => default;

    public bool IsOk => Problem is null;

    public static VerifyResult Fail(string problem, int fieldOffset = -1) => new(problem, fieldOffset);

    public override string ToString() => IsOk ? "ok" : FieldOffset >= 0 ? $"{Problem} (field at +{FieldOffset})" : Problem!;
}
