<#
.SYNOPSIS
    Remove Nalar's Windows shortcuts and its WSLg desktop entry; with -RemoveFiles its folder inside WSL
    (~/nalar). Offers to remove the pip and vLLM download caches the set-up filled.

.DESCRIPTION
    Settings, conversations and downloaded models live in the distro's ~/.config/nalar, ~/.local/share/nalar
    and ~/.cache/nalar; they stay unless -RemoveUserData is given too. Every removal is checked afterwards,
    and what could not be removed is named (exit code 1).

.EXAMPLE
    uninstall.cmd -RemoveFiles
#>
[CmdletBinding()]
param(
    # The distro Nalar was installed into. Without it: the one the Nalar shortcut starts (install.ps1's record),
    # else the same automatic choice as install.ps1's.
    [string]$Distro = "",
    [switch]$RemoveFiles,
    [switch]$RemoveUserData,
    # Remove pip's and vLLM's caches in the distro without asking (-KeepCaches: keep them without asking).
    [switch]$RemoveCaches,
    [switch]$KeepCaches
)

. (Join-Path $PSScriptRoot "wsl_common.ps1")

$left = @()
$iconDir = Join-Path $env:LOCALAPPDATA "Nalar"
$windowsFiles = @([Environment]::GetFolderPath("Programs"), [Environment]::GetFolderPath("Desktop")) |
    ForEach-Object { Join-Path $_ "Nalar.lnk" }

# The shortcuts are the only record of the distro install.ps1 used ("-d <distro> --cd ~ -- ..."): read it
# before anything is removed, and remove the shortcuts only once the distro's part is done.
if (-not $Distro) {
    $shell = New-Object -ComObject WScript.Shell
    foreach ($path in @($windowsFiles)) {
        if ((Test-Path -LiteralPath $path) -and $shell.CreateShortcut($path).Arguments -match "^-d (\S+) ") {
            $Distro = $Matches[1]
            break
        }
    }
}

if (-not (Get-Command wsl.exe -ErrorAction SilentlyContinue)) {
    Write-Host "WSL is not installed, so there is nothing of Nalar's inside it to remove."
} else {
    if (-not $Distro) {
        $row = Select-UbuntuDistro (Get-WslDistroRows) ${function:Get-UbuntuRelease}
        if (-not $row) {
            Fail "found no Nalar shortcut naming its distro, and no WSL 2 Ubuntu $($WslRules.min_ubuntu) or newer." `
                 "Pass the distro Nalar is in (see wsl -l -v): uninstall.cmd -Distro <name>."
        }
        $Distro = $row.Name
    }
    Write-Host "Removing Nalar from $Distro"
    $started = Invoke-WslCaptured @("-d", $Distro, "-e", "true")
    if ($started.Code -ne 0) { Stop-WithWslDiagnosis "starting $Distro" $started }
    # Each step checks its own removals and stops with what is left (Invoke-Inside fails on it).
    Invoke-Inside "remove-desktop-entry" -AsRoot
    if ($RemoveFiles) { Invoke-Inside "remove-files" }
    if ($RemoveUserData) { Invoke-Inside "remove-user-data" }

    Invoke-Inside "caches"
    $caches = @(Get-Said "cache")
    if ($caches.Count -gt 0 -and -not $KeepCaches) {
        Write-Host ""
        Write-Host "Nalar's set-up filled these download caches in $Distro (other Python projects may use them too):"
        $caches | ForEach-Object { Write-Host "    $_" }
        $remove = $RemoveCaches
        if (-not $remove) { $remove = (Read-Host "Remove them? [y/N]") -match "^\s*y" }
        if ($remove) { Invoke-Inside "remove-caches" }
    }
}

foreach ($path in @($windowsFiles) + $iconDir) {
    if (-not (Test-Path -LiteralPath $path)) { continue }
    Remove-Item -Recurse -Force -LiteralPath $path -ErrorAction SilentlyContinue
    if (Test-Path -LiteralPath $path) { $left += $path } else { Write-Host "removed $path" }
}

if ($left.Count -gt 0) {
    Fail "could not remove: $($left -join ', ')." "Close Nalar (and any window showing those files) and run uninstall.cmd again."
}
Write-Host "Nalar's shortcuts and desktop entry are gone." -ForegroundColor Green
if (-not $RemoveFiles) { Write-Host "Its files stay in ~/nalar in $Distro (uninstall.cmd -RemoveFiles removes them)." }
