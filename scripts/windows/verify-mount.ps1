<#
  Read-only end-to-end checks of a mounted XfsWin drive against the manifest the Linux kernel wrote
  when it filled the image (tests/XfsWin.Driver.Tests/Images/make-driver-image.sh).
  usage: verify-mount.ps1 -Drive X: -Manifest path\manifest.json [-Operations 5000] [-Seed 1]
#>
param(
  [Parameter(Mandatory)] [string] $Drive,
  [Parameter(Mandatory)] [string] $Manifest,
  [int] $Operations = 5000,
  [int] $Seed = 1
)
$ErrorActionPreference = 'Stop'
$failures = [System.Collections.Generic.List[string]]::new()
function Check([bool] $ok, [string] $what) { if (-not $ok) { $failures.Add($what); Write-Host "FAIL $what" } }
function HexToBytes([string] $hex) { [Convert]::FromHexString($hex) }

$m = Get-Content -Raw $Manifest | ConvertFrom-Json -AsHashtable
$root = "$Drive\"

# 1. Every plainly named file: size and SHA-256 as the kernel reported them; directories exist.
$forbidden = [char[]]'\:*?"<>|'
$checked = 0
foreach ($key in $m.entries.Keys) {
  if ($key -eq '') { continue }
  $bytes = HexToBytes $key
  if ($bytes | Where-Object { $_ -lt 0x20 -or $_ -ge 0x7f }) { continue }
  $rel = [Text.Encoding]::ASCII.GetString($bytes)
  if ($rel.IndexOfAny($forbidden) -ge 0 -or $rel.EndsWith('.') -or $rel.EndsWith(' ')) { continue }
  $e = $m.entries[$key]
  $path = Join-Path $root ($rel -replace '/', '\')
  $type = $e.mode -band 0xF000
  if ($type -eq 0x8000) {
    $item = Get-Item -LiteralPath $path -Force
    Check ($item.Length -eq $e.size) "$rel size $($item.Length) != $($e.size)"
    $hash = (Get-FileHash -LiteralPath $path -Algorithm SHA256).Hash.ToLowerInvariant()
    Check ($hash -eq $e.sha256) "$rel sha256 differs"
    $checked++
  } elseif ($type -eq 0x4000) {
    Check (Test-Path -LiteralPath $path -PathType Container) "$rel is not a directory"
  } elseif ($type -eq 0xA000) {
    $item = Get-Item -LiteralPath $path -Force
    Check ($item.LinkType -eq 'SymbolicLink') "$rel is not a symbolic link ($($item.LinkType))"
  }
}
Write-Host "checked $checked files against the kernel's hashes"

# 2. The 100,000-entry directory lists completely (resumed listings through WinFsp's markers).
$count = 0
foreach ($n in [IO.Directory]::EnumerateFileSystemEntries("$root\big")) { $count++ }
Check ($count -eq 100000) "big has $count entries, expected 100000"
$names = @(Get-ChildItem -LiteralPath "$root\names" -Force)
Check ($names.Count -eq $m.entries[[Convert]::ToHexString([Text.Encoding]::ASCII.GetBytes('names')).ToLowerInvariant()].children.Count) "names/ count differs"

# 3. fsx-style random reads, plain and memory-mapped, of pattern.bin (byte i = (7 i + 3) mod 251).
$rng = [Random]::new($Seed)
$file = "$root\pattern.bin"
$size = (Get-Item $file).Length
$fs = [IO.File]::Open($file, 'Open', 'Read', 'Read')
$map = [IO.MemoryMappedFiles.MemoryMappedFile]::CreateFromFile($fs, $null, 0, 'Read', 'None', $true)
$view = $map.CreateViewAccessor(0, 0, 'Read')
$buffer = [byte[]]::new(262144)
for ($op = 0; $op -lt $Operations; $op++) {
  $offset = [long]($rng.NextDouble() * $size)
  $length = [Math]::Min($rng.Next(1, $buffer.Length), $size - $offset)
  if ($op % 2 -eq 0) {
    $fs.Position = $offset
    $got = 0
    while ($got -lt $length) { $n = $fs.Read($buffer, $got, $length - $got); if ($n -le 0) { break }; $got += $n }
    Check ($got -eq $length) "read at $offset returned $got of $length"
  } else {
    $view.ReadArray($offset, $buffer, 0, $length) | Out-Null
  }
  foreach ($i in 0, ($length - 1), [int]($length / 2)) {
    $expected = (($offset + $i) * 7 + 3) % 251
    if ($buffer[$i] -ne $expected) { Check $false "op $op at $($offset + $i): $($buffer[$i]) != $expected"; break }
  }
}
$view.Dispose(); $map.Dispose(); $fs.Dispose()

# 4. Symlinks resolve inside the volume; special files are WSL reparse points.
Check ((Get-Content -Raw "$root\rel") -eq "hello world`n") "rel does not lead to hello.txt"
Check ((Get-Content -Raw "$root\dirlink\sub\inner.txt") -eq "inner`n") "dirlink\sub\inner.txt unreadable"
Check ((Get-Content -Raw "$root\dir\sub\abslink") -eq "hello world`n") "absolute symlink not resolved against the volume root"
Check ((fsutil reparsepoint query "$root\fifo" | Out-String) -match '0x80000024') "fifo is not IO_REPARSE_TAG_LX_FIFO"
Check ((fsutil reparsepoint query "$root\chr" | Out-String) -match '0x80000025') "chr is not IO_REPARSE_TAG_LX_CHR"

# 5. Security: the default mapping makes the mounting user the owner; EAs carry user.* xattrs.
$me = [Security.Principal.WindowsIdentity]::GetCurrent().User.Value
$acl = Get-Acl "$root\hello.txt"
Write-Host "hello.txt: $($acl.Sddl)"
Check ($acl.Sddl.StartsWith("O:") -and $acl.GetOwner([Security.Principal.SecurityIdentifier]).Value -in @($me, 'S-1-5-18')) "owner is not the mounting user"
Check ((fsutil file queryEA "$root\hello.txt" | Out-String) -match 'color') "EA 'color' missing"

# 6. The volume is read-only and says what it is.
$info = fsutil fsinfo volumeinfo $Drive | Out-String
Write-Host $info
Check ($info -match 'XFSWINTEST') "label missing"
Check ($info -match 'Read-only|read only|Read Only') "volume not reported read-only"
try { New-Item -ItemType File "$root\should-fail" | Out-Null; Check $false "creating a file succeeded on a read-only mount" }
catch { Check ($_.Exception.Message -match 'write protected|write-protected|read-only') "unexpected error creating a file: $($_.Exception.Message)" }

if ($failures.Count -gt 0) { Write-Host "$($failures.Count) check(s) failed"; exit 1 }
Write-Host "all checks passed on $Drive"
