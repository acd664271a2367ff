# What install.ps1 and uninstall.ps1 share: talking to wsl.exe, reading its answers, and running a step of
# inside_wsl.sh in the distro. Dot-sourced; expects $Distro to be set by the caller. ASCII only: Windows
# PowerShell 5.1 reads a script without a byte-order mark in the ANSI code page.

Set-StrictMode -Version Latest
$ErrorActionPreference = "Stop"

# wsl.exe (told by WSL_UTF8) and every Linux program write UTF-8. Decode it as UTF-8, not in the console's
# code page, or a user folder like C:\Users\Juergen with an umlaut arrives garbled.
$Utf8 = New-Object System.Text.UTF8Encoding $false
[Console]::OutputEncoding = $Utf8
$OutputEncoding = $Utf8
$env:WSL_UTF8 = "1"

# Rules shared with the tests (tests/install/test_windows_wsl_rules.py): the `wsl -l -v` row and the diagnoses.
$WslRules = Get-Content -Raw -Encoding UTF8 (Join-Path $PSScriptRoot "wsl_rules.json") | ConvertFrom-Json

# Runs inside_wsl.sh from this folder, whose Windows path reaches WSL in NALAR_SCRIPTS (WSLENV /p). The
# path is never quoted into a command line: IFS= and set -f keep it one word whatever it holds. A path WSL
# could not translate (a network share) exits 86, which wsl_rules.json names.
$Bootstrap = 'set -f; IFS=; s=$NALAR_SCRIPTS/inside_wsl.sh; case $s in /?*) ;; *) exit 86;; esac; [ -f $s ] || exit 86; exec bash $s $@'

function Set-WslPathVariable([string]$Name, [string]$WindowsPath) {
    # /p: WSL translates the Windows path itself, in UTF-16, with no wslpath round trip through a code page.
    Set-Item -Path "env:$Name" -Value $WindowsPath
    $entries = @("$Name/p") + @(($env:WSLENV -split ":") | Where-Object { $_ -and ($_ -notlike "$Name/*") })
    $env:WSLENV = $entries -join ":"
}
Set-WslPathVariable "NALAR_SCRIPTS" $PSScriptRoot

function Fail([string]$Problem, [string]$Fix) {
    Write-Host ""
    Write-Host "Nalar: $Problem" -ForegroundColor Red
    Write-Host "Fix: $Fix" -ForegroundColor Yellow
    exit 1
}

function Step([string]$Text) {
    Write-Host "==> $Text" -ForegroundColor Cyan
}

# The built-in (pre-Store) wsl.exe ignores WSL_UTF8 and writes UTF-16: read as UTF-8, every letter comes
# with a NUL byte, and a byte-order mark may lead. Both go.
function ConvertFrom-WslText([string[]]$Lines) {
    foreach ($line in $Lines) { ($line -replace "`0", "") -replace "^\uFEFF", "" }
}

# Runs wsl.exe for a check whose message matters: stdout and stderr together, cleaned, plus the exit code.
function Invoke-WslCaptured([string[]]$Arguments) {
    $previous = $ErrorActionPreference
    $ErrorActionPreference = "Continue"  # Windows PowerShell turns a native program's stderr lines into errors
    try {
        $lines = @(& wsl.exe @Arguments 2>&1 | ForEach-Object { "$_" })
        $code = $LASTEXITCODE
    } finally {
        $ErrorActionPreference = $previous
    }
    return [pscustomobject]@{ Code = $code; Text = (@(ConvertFrom-WslText $lines) -join "`n") }
}

# The first rule of wsl_rules.json that fits: by our own exit code, or by a pattern in wsl.exe's message
# (case-insensitive, as -match is). $null when none does.
function Get-WslDiagnosis([int]$Code, [string]$Text) {
    foreach ($rule in $WslRules.diagnoses) {
        $names = $rule.PSObject.Properties.Name
        if (($names -contains "exit_code") -and $rule.exit_code -eq $Code) { return $rule }
        if (($names -contains "pattern") -and $Text -match $rule.pattern) { return $rule }
    }
    return $null
}

function Stop-WithWslDiagnosis([string]$What, $Result) {
    $rule = Get-WslDiagnosis $Result.Code $Result.Text
    if ($rule) { Fail $rule.problem $rule.fix }
    Fail "$What failed (wsl.exe exit code $($Result.Code)): $($Result.Text)" `
         "Run wsl --update and then wsl --shutdown in PowerShell, and run this again."
}

# Runs one step of inside_wsl.sh in the distro. Its output is shown as it comes, except the lines for us
# ("nalar-problem: ...", "nalar-home=..."), which land in $Said. Stops with the step's own problem and fix.
function Invoke-Inside([string]$StepName, [string[]]$Arguments = @(), [switch]$AsRoot) {
    $userArgs = @()
    if ($AsRoot) { $userArgs = @("-u", "root") }
    $script:Said = @{}
    & wsl.exe -d $Distro @userArgs -e bash -c $Bootstrap inside-wsl $StepName @Arguments | ForEach-Object {
        foreach ($line in @(ConvertFrom-WslText @("$_"))) {
            if ($line -match "^nalar-(\w+)[:=] ?(.*)$") {
                $key, $value = $Matches[1], $Matches[2]
                if (-not $script:Said.ContainsKey($key)) { $script:Said[$key] = @() }
                $script:Said[$key] += $value
                if ($key -eq "warning") { Write-Host $value -ForegroundColor Yellow }
            } else {
                Write-Host $line
            }
        }
    }
    $code = $LASTEXITCODE
    if ($code -eq 0) { return }
    if ($script:Said.ContainsKey("problem")) { Fail ($script:Said["problem"] -join " ") ($script:Said["fix"] -join " ") }
    Stop-WithWslDiagnosis "the step '$StepName' inside $Distro" ([pscustomobject]@{ Code = $code; Text = "" })
}

function Get-Said([string]$Key) {
    if ($script:Said.ContainsKey($Key)) { return @($script:Said[$Key]) }
    return @()
}

# The rows of `wsl -l -v`: Name, Version (WSL 1 or 2), Default (the starred row). Stops on wsl.exe's error.
function Get-WslDistroRows {
    $listing = Invoke-WslCaptured @("-l", "-v")
    if ($listing.Code -ne 0) { Stop-WithWslDiagnosis "wsl -l -v" $listing }
    return @(foreach ($line in $listing.Text -split "`n") {
        $isDefault = $line -match "^\s*\*"
        if ($line -match $WslRules.distro_row -and $Matches[1] -ne "NAME") {
            [pscustomobject]@{ Name = $Matches[1]; Version = [int]$Matches[3]; Default = $isDefault }
        }
    })
}

# Ubuntu's release in a distro whose name doesn't say it ("Ubuntu"): its /etc/os-release, or $null.
function Get-UbuntuRelease([string]$Name) {
    $said = Invoke-WslCaptured @("-d", $Name, "-e", "sh", "-c", ". /etc/os-release && echo `$VERSION_ID")
    if ($said.Code -eq 0 -and $said.Text.Trim() -match "^\d+\.\d+$") { return $said.Text.Trim() }
    return $null
}

# The automatic choice when -Distro is not given (tests/install/test_windows_distro_choice.py mirrors it): a WSL 2
# Ubuntu of at least min_ubuntu, its release from the name (Ubuntu-24.04) or asked ($ReleaseOf); the
# default row when it is one, else the newest. The default row may be WSL 1 or 20.04 while a usable
# Ubuntu-24.04 sits below it. $null when none is usable.
function Select-UbuntuDistro($Rows, [scriptblock]$ReleaseOf) {
    $usable = @(foreach ($row in $Rows) {
        if ($row.Version -ne 2 -or -not ($row.Name -match $WslRules.ubuntu_name)) { continue }
        $release = if ($Matches[1]) { $Matches[1] } else { & $ReleaseOf $row.Name }
        if ($release -and ([version]$release -ge [version]$WslRules.min_ubuntu)) {
            [pscustomobject]@{ Row = $row; Release = [version]$release }
        }
    })
    $default = @($usable | Where-Object { $_.Row.Default })
    if ($default.Count -gt 0) { return $default[0].Row }
    $newest = @($usable | Sort-Object -Property Release -Descending)
    if ($newest.Count -gt 0) { return $newest[0].Row }
    return $null
}

# Free bytes on the Windows drive that holds the distro's virtual disk (ext4.vhdx grows there; df inside WSL
# shows the disk's 1 TB maximum, not what the drive has).
function Get-DistroDriveFreeBytes([string]$Name) {
    $base = $env:LOCALAPPDATA
    foreach ($key in @(Get-ChildItem "HKCU:\Software\Microsoft\Windows\CurrentVersion\Lxss" -ErrorAction SilentlyContinue)) {
        $entry = Get-ItemProperty -LiteralPath $key.PSPath
        $names = $entry.PSObject.Properties.Name
        if (($names -contains "BasePath") -and ($names -contains "DistributionName") -and $entry.DistributionName -eq $Name) {
            $base = $entry.BasePath -replace "^\\\\\?\\", ""
        }
    }
    return (New-Object System.IO.DriveInfo ([System.IO.Path]::GetPathRoot($base))).AvailableFreeSpace
}
